"""Leave-one-task-out transfer benchmark on a YAHPO Gym scenario, run by the product's own engine.

Every run is an ordinary study of the surrogate-benchmark job (``--job yahpo:SCENARIO``, see
:mod:`agent.jobs.yahpo`): the other tasks' histories are imported into a fresh knowledge base with
the code of ``tune-agent import``, the study is created by :func:`agent.tuning.service.prepare_study`
(warm start off, the method as ``--sampler``/``--surrogate``) and driven by ``Study.ask``/``tell``
with :func:`agent.execution.runner.run_trial` — exactly what ``tune-agent start`` runs. Methods are the
samplers ``random`` and ``tpe`` and every surrogate of the registry.

Protocol (LCBench defaults: Zimmer et al. 2021 through YAHPO Gym, Pfisterer et al. 2022):
- each other task contributes ``history_size`` (100) configurations drawn uniformly in the cube
  and snapped, from its own stream ``(history_seed, task index)``;
- the target is the job's metric (lcbench: ``val_accuracy`` at epoch 52), 30 trials, 5 seeds;
- regret after ``t`` trials is ``(best - best_so_far) / (max - min)`` over 5000 random
  configurations of the task (fixed seed), clipped below at 0;
- reported: mean regret at trials 1, 3, 5, 10, 20, 30, the average rank at trial 5 and the median
  seconds per suggestion (``Study.ask``).

For ``tnp`` the network is meta-trained once per fold (task ``i`` in fold ``i mod 5``) on the
other folds' histories, read through the knowledge base like the product's ``train-transfer``
stage; a target is always optimised with the network that never saw its fold.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import numpy as np

from agent.errors import TuneAgentError
from agent.tuning.source_models import build_history_models

if TYPE_CHECKING:
    from agent.config import StudyRequest
    from agent.jobs.yahpo import YahpoJob

QUICK_TASKS, QUICK_SEEDS = 4, 2
TNP_FOLDS = 5


def sampler_methods() -> tuple[str, ...]:
    """The samplers that are methods of their own: the sampler registry's entries that need no surrogate."""
    from agent.samplers.registry import without_surrogate

    return without_surrogate()


def method_names() -> tuple[str, ...]:
    """Every method the benchmark can run: the samplers and the registry's surrogates."""
    from agent.tuning.plan import surrogate_names

    return (*sampler_methods(), *surrogate_names())


def load_yahpo_job(spec: str) -> YahpoJob:
    """The YAHPO job ``spec`` names (``yahpo:SCENARIO[?...]``), as :func:`agent.jobs.load_job` loads it."""
    from agent.jobs import load_job
    from agent.jobs.yahpo import YahpoJob

    job = load_job(spec)
    if not isinstance(job, YahpoJob):
        raise TuneAgentError(f"job spec {spec!r} is not a YAHPO scenario (yahpo:SCENARIO)")
    return job


def check_methods(methods: Sequence[str]) -> None:
    known = method_names()
    unknown = [m for m in methods if m not in known]
    if unknown or not methods:
        raise TuneAgentError(f"unknown method {unknown[0] if unknown else '(none)'!r}; choose from {', '.join(known)}")


@dataclass(frozen=True)
class BenchConfig:
    scenario: str  # folder
    target: str | None = None  # None: the scenario's default output
    mode: str | None = None  # None: the scenario's default direction for the target
    fidelity: Mapping[str, float] = field(default_factory=dict)
    tasks: tuple[str, ...] | None = None  # None = every instance
    seeds: int = 5
    budget: int = 30
    history_size: int = 100  # configurations per source task (--history)
    sources: int | None = None  # source tasks in each run's history (--sources): None = every other task
    report_at: tuple[int, ...] = (1, 3, 5, 10, 20, 30)
    workers: int = 2  # <= 1 runs in this process
    quick: bool = False
    history_seed: int = 0
    reference_size: int = 5000
    reference_seed: int = 12345
    control: str = "none"  # "shuffled": each source's responses permuted (negative-transfer control)
    cache_dir: str = "data/bench-cache"
    batch: int = 1  # trials in flight per study (parallel workers, simulated; see agent.execution.workers)
    pending: str = "auto"  # how those running trials enter a BO step (agent.config.PENDING)
    ask_ahead: int = 0  # trials asked beyond the batch, each started when one ends (start --ask-ahead)
    random_every: int | None = None  # start --random-every for every BO study (None: the product's default)

    @property
    def job_spec(self) -> str:
        query = {k: v for k, v in (("target", self.target), ("mode", self.mode)) if v}
        query.update({k: f"{v:g}" for k, v in sorted(self.fidelity.items())})
        return f"yahpo:{Path(self.scenario).resolve()}" + (f"?{urlencode(query)}" if query else "")

    def resolve(self, instances: Sequence[str]) -> BenchConfig:
        """Explicit task list (quick mode: 4 tasks spread over the list)."""
        if self.control not in ("none", "shuffled"):
            raise TuneAgentError(f"unknown control {self.control!r}; choose none or shuffled")
        if self.tasks is not None:
            unknown = sorted(set(self.tasks) - set(instances))
            if unknown:
                raise TuneAgentError(f"unknown task {unknown[0]!r}; the scenario has {', '.join(instances[:8])}, ...")
            return self
        if not self.quick:
            return replace(self, tasks=tuple(instances))
        step = max(len(instances) // QUICK_TASKS, 1)
        return replace(self, tasks=tuple(instances[::step][:QUICK_TASKS]))


# -- protocol ------------------------------------------------------------------------------------
def make_histories(job: Any, config: BenchConfig) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per task: ``history_size`` uniform cube points (snapped) and their objective values, with the
    control applied (shuffled: each task's values permuted over its configurations)."""
    space, out = job.space, {}
    for i, instance in enumerate(job.scenario.instances):
        U = space.snap(np.random.default_rng([config.history_seed, i]).random((config.history_size, space.dim)))
        y = np.asarray(job.evaluate_many(U, job.task(instance)), dtype=float)
        if config.control == "shuffled":
            y = np.random.default_rng([config.history_seed, 99, i]).permutation(y)
        out[instance] = (U, y)
    return out


def history_store(
    job: Any, histories: Mapping[str, tuple[np.ndarray, np.ndarray]], tasks: Sequence[str], kb: Any = None
) -> Any:
    """A knowledge base holding ``tasks``' histories, imported as ``tune-agent import`` does."""
    import pandas as pd

    from agent.knowledge import open_knowledge_base
    from agent.knowledge.importer import import_table

    kb = kb if kb is not None else open_knowledge_base("memory:")
    rows = [{"task": t, **job.space.decode(u), "value": float(v)} for t in tasks for u, v in zip(*histories[t])]
    if rows:
        import_table(kb, pd.DataFrame(rows), job.space, job.name, job.metric, job.mode, prefix="bench")
    return kb


def run_sources(instances: Sequence[str], task: str, config: BenchConfig) -> list[str]:
    """The source tasks of ``task``'s runs: every other task, or (``config.sources``) that many of
    them drawn once per task (the same for every method and seed), in the scenario's order."""
    others = [t for t in instances if t != task]
    if config.sources is None or config.sources >= len(others):
        return others
    rng = np.random.default_rng([config.history_seed, 7, list(instances).index(task)])
    keep = set(rng.choice(len(others), size=config.sources, replace=False).tolist())
    return [t for i, t in enumerate(others) if i in keep]


def reference_range(job: Any, task: str, config: BenchConfig) -> tuple[float, float]:
    """(worst, best) of the objective over ``reference_size`` random configurations, maximised."""
    U = job.space.snap(np.random.default_rng(config.reference_seed).random((config.reference_size, job.space.dim)))
    y = np.asarray(job.evaluate_many(U, job.task(task)), dtype=float) * (1.0 if job.mode == "max" else -1.0)
    return float(y.min()), float(y.max())


def normalised_regret(y: np.ndarray, low: float, high: float) -> np.ndarray:
    """Best-so-far regret per trial (``y`` maximised), scaled by the reference range, clipped at 0."""
    best = np.maximum.accumulate(np.asarray(y, dtype=float))
    return np.clip((high - best) / max(high - low, 1e-12), 0.0, None)


# -- TNP folds -----------------------------------------------------------------------------------
def fold_of(task_index: int) -> int:
    return task_index % TNP_FOLDS


def tnp_fold_dir(
    job: Any,
    histories: Mapping[str, tuple[np.ndarray, np.ndarray]],
    fold: int,
    config: BenchConfig,
    tnp_params: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The models dir of the TNP meta-trained on the tasks outside ``fold`` (trained if not cached).

    Named by the TNP settings and the training sources' contents, so a control's shuffled
    histories never reuse a network meta-trained on the real ones.
    """
    from agent.pipeline.metamodels import history_sources, tnp_key, tnp_settings, tnp_trained, train_tnp

    settings = tnp_settings(tnp_params)
    tasks = [t for i, t in enumerate(job.scenario.instances) if fold_of(i) != fold]
    sources = history_sources(history_store(job, histories, tasks), job.name, job.space)
    folder = Path(config.cache_dir) / f"tnp-{job.name}-fold{fold}-{tnp_key(sources, settings)}"
    if not tnp_trained(folder):
        train_tnp(
            sources,
            job.name,
            job.space.signature(),
            folder,
            settings,
            progress=None if progress is None else (lambda line: progress(f"TNP fold {fold}: {line}")),
        )
    return folder


def _train_fold(config: BenchConfig, fold: int) -> tuple[int, str]:
    job, histories, _ = _worker_state(config)  # a worker's lines go to the shared stderr, as the bench's own do
    return fold, str(
        tnp_fold_dir(job, histories, fold, config, progress=lambda line: print(line, file=sys.stderr, flush=True))
    )


def train_tnp_folds(
    config: BenchConfig, folds: Sequence[int], progress: Callable[[str], None] | None = None
) -> dict[int, str]:
    """The TNP of each fold in ``folds``, meta-trained ``config.workers`` at a time (cached ones
    are read), each saying its steps; returns each fold's models dir."""
    if not folds:
        return {}
    say, start = progress or (lambda line: None), time.perf_counter()
    say(
        f"TNP: meta-training {len(folds)} fold(s), {max(1, min(config.workers, len(folds)))} at a time (cached "
        "folds are read)"
    )
    out: dict[int, str] = {}
    if config.workers <= 1 or len(folds) == 1:
        for fold in folds:
            out[fold] = str(tnp_fold_dir(*_worker_state(config)[:2], fold, config, progress=progress))
            say(f"TNP fold {fold} ready ({len(out)}/{len(folds)}, {time.perf_counter() - start:.0f} s)")
        return out
    with ProcessPoolExecutor(
        min(config.workers, len(folds)), mp_context=get_context("spawn"), initializer=pin_threads
    ) as pool:
        for future in as_completed([pool.submit(_train_fold, config, fold) for fold in folds]):
            fold, folder = future.result()
            out[fold] = folder
            say(f"TNP fold {fold} ready ({len(out)}/{len(folds)}, {time.perf_counter() - start:.0f} s)")
    return out


# -- one run -------------------------------------------------------------------------------------
def run_method(
    job_spec: str,
    task: str,
    method: str,
    kb: Any,
    seed: int,
    budget: int,
    models_dir: str = "models",
    fits: Any = None,
    batch: int = 1,
    pending: str = "auto",
    ask_ahead: int = 0,
    timings: dict[str, float] | None = None,
    random_every: int | None = None,
) -> tuple[list[dict[str, Any]], np.ndarray, list[float]]:
    """One study of ``method`` on ``task`` over the history in ``kb``, as ``tune-agent start
    [--workers batch --ask-ahead ask_ahead --pending pending]`` runs it: the product's study loop, with ``batch`` trials
    in flight (:class:`agent.execution.workers.QueuedExecutor`).

    Returns the configurations in trial order, the objective values (maximised) and the seconds
    each ``ask`` took; ``timings`` (if given) gets ``prepare_s``, the study's preparation.
    """
    from agent.execution.progress import SilentReporter
    from agent.execution.resources import ExecutionSettings
    from agent.execution.runner import run_study
    from agent.execution.workers import make_executor
    from agent.knowledge.records import COUNTED_STATES, TRIAL_OK
    from agent.tuning.service import prepare_study

    req = _study_request(job_spec, task, method, seed, budget, models_dir, pending)
    if random_every is not None:
        req = replace(req, random_every=random_every)
    start = time.perf_counter()
    study, job, data, _ = prepare_study(req, echo=lambda _: None, kb=kb, fits=fits)
    if timings is not None:
        timings["prepare_s"] = time.perf_counter() - start
    timing = run_study(
        study,
        job,
        data,
        None,
        SilentReporter(),
        trace_plot=False,
        executor=make_executor(study, job, data, None, ExecutionSettings(workers=batch, ask_ahead=ask_ahead)),
    )
    trials = sorted((t for t in study.trials() if t.state in COUNTED_STATES), key=lambda t: t.number)
    configs = [dict(t.config) for t in trials]
    values = [study.settings.sign * t.value if t.state == TRIAL_OK and t.value is not None else np.nan for t in trials]
    return configs, np.array(values), timing.ask_seconds


def _study_request(
    job_spec: str, task: str, method: str, seed: int, budget: int, models_dir: str, pending: str
) -> StudyRequest:
    """The study of ``method`` on ``task``: a sampler of its own (on gp), or bo with the surrogate."""
    from agent.config import StudyRequest

    own = method in sampler_methods()
    return StudyRequest(
        dataset=task,
        job=job_spec,
        trials=budget,
        seed=seed,
        study_name=f"bench-{method}-{task}-{seed}",
        warm_start="none",
        surrogate="gp" if own else method,
        sampler=method if own else "bo",
        models_dir=models_dir,
        pending=pending,
    )


# -- workers -------------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}  # per process: the job, its histories and the source fits


@dataclass(frozen=True)
class RunArgs:
    task: str
    seed: int
    methods: tuple[str, ...]
    config: BenchConfig
    fold_dir: str | None


def pin_threads() -> None:
    """A benchmark worker: one torch thread, and no torch.jit deprecation notice per process (the
    product's command line hides it the same way)."""
    import warnings

    import torch

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit.*")
    torch.set_num_threads(1)


def _worker_state(config: BenchConfig) -> tuple[Any, dict, Any]:
    from agent.jobs import load_job
    from agent.tuning.plan import source_cache

    key = json.dumps({**asdict(config), "tasks": None, "seeds": 0, "workers": 0}, sort_keys=True, default=str)
    if _WORKER.get("key") != key:
        job = load_job(config.job_spec)
        _WORKER.update(key=key, job=job, histories=make_histories(job, config), fits=source_cache())
    return _WORKER["job"], _WORKER["histories"], _WORKER["fits"]


def run_one(job_args: RunArgs) -> dict[str, Any]:
    """All methods on one (task, seed): regret curves and suggestion times per method."""
    config = job_args.config
    job, histories, fits = _worker_state(config)
    low, high = reference_range(job, job_args.task, config)
    sources = run_sources(job.scenario.instances, job_args.task, config)
    out: dict[str, Any] = {"task": job_args.task, "seed": job_args.seed, "methods": {}}
    # the history's source models, built as `meta publish` does for the product, timed apart
    build_s = (
        build_history_models(history_store(job, histories, sources), job.name, job.space, fits)
        if set(job_args.methods) - set(sampler_methods()) - {"gp"}
        else 0.0
    )
    for method in job_args.methods:
        kb = history_store(job, histories, sources)
        models_dir = job_args.fold_dir if method == "tnp" and job_args.fold_dir else "models"
        timings: dict[str, float] = {}
        _, y, seconds = run_method(
            config.job_spec,
            job_args.task,
            method,
            kb,
            job_args.seed,
            config.budget,
            models_dir,
            fits,
            config.batch,
            config.pending,
            config.ask_ahead,
            timings,
            config.random_every,
        )
        out["methods"][method] = {
            "regret": normalised_regret(np.nan_to_num(y, nan=-np.inf), low, high).tolist(),
            "seconds": seconds,  # first trial: the preparation and the first ask
            "first_trial_s": round(timings["prepare_s"] + (seconds[0] if seconds else 0.0), 3),
            "source_models_s": round(build_s, 3),
        }
    return out
