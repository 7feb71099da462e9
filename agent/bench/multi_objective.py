"""`tune-agent-bench lcbench-mo`: several objectives on LCBench (YAHPO Gym's surrogate; Pfisterer
et al. 2022, Zimmer et al. 2021): validation accuracy against training time, each run a product
study (``tune-agent start --metric val_accuracy:max --metric time:min``).

Methods: ``bo`` (the product's qLogNEHVI over one GP per objective, cold), ``tpe`` (Optuna's
multi-objective TPESampler behind the same study loop), ``random``. Per task, the reference
point is the nadir of ``reference_configs`` random configurations and the best hypervolume is
that of their front (a lookup of the surrogate, never a study); a run's hypervolume regret after
``k`` trials is ``1 - HV(front of its first k trials) / HV(reference front)`` (negative where a
method beats the random sample's front). Time counts: each study's wall seconds are reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from typing import Any

import numpy as np

from agent.bench.fingerprint import engine_fingerprint, environment

METRICS = ("val_accuracy:max", "time:min")
METHODS = ("bo", "tpe", "random")
PROTOCOL = (
    "A YAHPO Gym surrogate, tasks {tasks}, seeds {seeds}: each run a product study of {budget} "
    "trials with --metric {metrics} (no history: cold), --sampler bo "
    "(qLogNEHVI), tpe (Optuna's multi-objective TPE) or random; hypervolume regret against the front "
    "of {reference} random configurations per task, from the nadir of those configurations"
)


@dataclass(frozen=True)
class MoConfig:
    scenario: str
    tasks: tuple[str, ...]
    seeds: int = 2
    budget: int = 30
    checkpoints: tuple[int, ...] = (10, 30)
    methods: tuple[str, ...] = METHODS
    reference_configs: int = 2000
    metrics: tuple[str, ...] = METRICS
    extra: dict[str, Any] = field(default_factory=dict)


def maximised(values: np.ndarray, metrics: Sequence[str]) -> np.ndarray:
    """Objective rows (`n x m`, in ``metrics``' order) signed so that larger is better."""
    signs = np.array([1.0 if m.endswith(":max") else -1.0 for m in metrics])
    return values * signs


def reference(job: Any, task: str, size: int, metrics: Sequence[str], seed: int = 0) -> tuple[np.ndarray, float]:
    """(the maximised reference point, the hypervolume of the front of ``size`` random
    configurations) for ``task``."""
    from agent.samplers.pareto import hypervolume, non_dominated

    U = np.random.default_rng(seed).random((size, job.space.dim))
    out = job.scenario.predict(task, job.space.snap(U))
    names = [m.split(":")[0] for m in metrics]
    Y = maximised(out[:, [job.scenario.targets.index(n) for n in names]], metrics)
    ref = Y.min(axis=0)
    return ref, hypervolume(Y[non_dominated(Y)], ref)


def run_study(
    job_spec: str, task: str, method: str, seed: int, budget: int, metrics: Sequence[str] = METRICS
) -> tuple[np.ndarray, float]:
    """One product study: the maximised objectives of its finished trials in trial order (NaN rows
    for failed ones) and its wall seconds."""
    from agent.config import StudyRequest
    from agent.execution.progress import SilentReporter
    from agent.execution.resources import ExecutionSettings
    from agent.execution.runner import run_study as run
    from agent.execution.workers import make_executor
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.records import COUNTED_STATES
    from agent.samplers.pareto import objective_values
    from agent.tuning.service import prepare_study

    req = StudyRequest.from_options(
        dataset=task,
        job=job_spec,
        trials=budget,
        seed=seed,
        study_name=f"mo-{method}-{task}-{seed}",
        warm_start="none",
        surrogate="gp",
        sampler=method,
        metrics=tuple(metrics),
    )
    start = time.perf_counter()
    study, job, data, _ = prepare_study(req, echo=lambda _: None, kb=open_knowledge_base("memory:"))
    executor = make_executor(study, job, data, None, ExecutionSettings(workers=1, ask_ahead=0))
    run(study, job, data, None, SilentReporter(), trace_plot=False, executor=executor)
    seconds = time.perf_counter() - start
    names = [m.split(":")[0] for m in metrics]
    rows = []
    for t in sorted((t for t in study.trials() if t.state in COUNTED_STATES), key=lambda t: t.number):
        values = objective_values(t, study.settings)
        rows.append([np.nan] * len(names) if values is None else [values[n] for n in names])
    return maximised(np.array(rows).reshape(-1, len(names)), metrics), seconds


def regret_curve(Y: np.ndarray, ref: np.ndarray, best: float, checkpoints: Sequence[int]) -> dict[str, float]:
    """Hypervolume regret after each checkpoint's number of trials."""
    from agent.samplers.pareto import hypervolume, non_dominated

    out = {}
    for k in checkpoints:
        seen = Y[:k]
        seen = seen[np.all(np.isfinite(seen), axis=1)]
        volume = hypervolume(seen[non_dominated(seen)], ref) if len(seen) else 0.0
        out[str(k)] = 1.0 - volume / best if best > 0 else float("nan")
    return out


def run_mo_benchmark(config: MoConfig, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Every (task, seed, method) study, and the mean regret and seconds per method."""
    from agent.bench.transfer import load_yahpo_job, pin_threads

    pin_threads()
    spec = f"yahpo:{config.scenario}"
    job = load_yahpo_job(spec)
    runs = []
    for task in config.tasks:
        ref, best = reference(job, task, config.reference_configs, config.metrics)
        for seed in range(config.seeds):
            for method in config.methods:
                Y, seconds = run_study(spec, task, method, seed, config.budget, config.metrics)
                regret = regret_curve(Y, ref, best, config.checkpoints)
                runs.append({"task": task, "seed": seed, "method": method, "regret": regret, "seconds": seconds})
                shown = ", ".join(f"{k}: {v:.3f}" for k, v in regret.items())
                progress(f"{task} seed {seed} {method}: hypervolume regret {shown} ({seconds:.1f} s)")
    return {
        "summary": summarise(runs, config),
        "runs": runs,
        "settings": {k: v for k, v in asdict(config).items() if k != "extra"},
        "engine": engine_fingerprint("bench/multi_objective.py"),
        "environment": environment(),
        "date": date.today().isoformat(),
        "protocol": PROTOCOL.format(
            tasks=", ".join(config.tasks),
            seeds=config.seeds,
            budget=config.budget,
            reference=config.reference_configs,
            metrics=" --metric ".join(config.metrics),
        ),
        **config.extra,
    }


def summarise(runs: Sequence[dict[str, Any]], config: MoConfig) -> dict[str, Any]:
    """Per method: mean hypervolume regret at each checkpoint, mean study seconds, and the paired
    Wilcoxon p-value of bo against each other method at each checkpoint."""
    from scipy.stats import wilcoxon

    out: dict[str, Any] = {}
    for method in config.methods:
        mine = [r for r in runs if r["method"] == method]
        out[method] = {
            "regret": {str(k): float(np.mean([r["regret"][str(k)] for r in mine])) for k in config.checkpoints},
            "seconds": float(np.mean([r["seconds"] for r in mine])),
            "runs": len(mine),
        }
    if "bo" in config.methods:
        key = {(r["task"], r["seed"], r["method"]): r for r in runs}
        pairs = sorted({(r["task"], r["seed"]) for r in runs})
        for method in config.methods:
            if method == "bo":
                continue
            tests = {}
            for k in config.checkpoints:
                a = [key[(t, s, "bo")]["regret"][str(k)] for t, s in pairs]
                b = [key[(t, s, method)]["regret"][str(k)] for t, s in pairs]
                diff = np.array(a) - np.array(b)
                tests[str(k)] = float(wilcoxon(diff).pvalue) if np.any(diff != 0) and len(diff) > 1 else 1.0
            out[method]["bo_vs_p"] = tests
    return out
