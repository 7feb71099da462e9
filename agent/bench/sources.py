"""`tune-agent-bench sources`: a study's preparation and suggestions as the history grows in datasets.

History: ``N`` source datasets of the LCBench space (Zimmer et al. 2021, through YAHPO Gym's ONNX
surrogate): source ``i`` is the real response surface of task ``i mod 34`` (the target excluded) at
``points`` random configurations of its own seed, so the surfaces are real and the sources many.
They are written into an in-memory store, one finished study each, as ``tune-agent import`` writes
them. Their source models are built once, timed apart (what ``tune-agent meta source-models``, the
DVC stage or the studies' ends pay). Then one product study on the held-out target, timed: its
preparation (``prepare_study``: the history listed, sources from the stored models, the transfer
surrogate built) and the median seconds of its BO suggestions. Repeated per size; ``gp`` (no
history) in the same process is the baseline.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def synthetic_history(job: Any, target: str, size: int, points: int, seed: int = 0) -> Any:
    """An in-memory store of ``size`` finished studies, each a real task's surface at its own
    ``points`` random configurations."""
    from agent.config import StudySettings
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.importer import task_fingerprint

    kb = open_knowledge_base("memory:")
    tasks = [t for t in job.scenario.instances if t != target]
    space = job.space
    draws: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for i in range(size):  # one ONNX call per task for all its sources
        draws.setdefault(tasks[i % len(tasks)], []).append(
            (space.snap(np.random.default_rng((seed, i)).random((points, space.dim))), np.empty(0))
        )
    for task, rows in draws.items():
        values = np.asarray(job.evaluate_many(np.concatenate([U for U, _ in rows]), job.task(task)), dtype=float)
        draws[task] = [(U, values[k * points : (k + 1) * points]) for k, (U, _) in enumerate(rows)]
    for i in range(size):
        task = tasks[i % len(tasks)]
        U, y = draws[task][i // len(tasks)]
        name = f"s{i:05d}-{task}"
        settings = StudySettings(
            job=f"external:{job.name}",
            job_name=job.name,
            dataset=name,
            dataset_name=name,
            fingerprint=task_fingerprint(job.name, name),
            space_signature=space.signature(),
            metric=job.metric,
            mode=job.mode,
            trials=points,
            n_init=points,
            warm_start="none",
        )
        kb.import_evaluations(
            f"bench-{name}",
            settings.to_dict(),
            space.to_dict(),
            [space.decode(u) for u in U],
            [float(v) for v in y],
            "synthetic source",
        )
    return kb


PROTOCOL = (
    "N synthetic sources: task (i mod T)'s surface of the YAHPO scenario (T tasks less the target) at 30 "
    "random configurations of seed "
    "(0, i), one finished study each in an in-memory store; source models built once "
    "(update_source_models, timed apart; above fit_up_to sources each task's first fit is transplanted to "
    "its other sources, with each source's own signal check); then prepare_study (warm start none, the "
    "method as "
    "--surrogate) on the held-out target, timed, and a study of `budget` trials whose BO asks give "
    "the median suggestion time"
)


def measure_sources(
    sizes: Sequence[int],
    methods: Sequence[str] = ("gp", "rgpe"),
    target: str = "3945",
    points: int = 30,
    budget: int = 12,
    scenario: str = "lcbench",
    fit_up_to: int = 240,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Above ``fit_up_to`` sources the source models are transplanted
    (:func:`agent.tuning.source_models.transplanted_source_models`)."""
    from agent.bench.fingerprint import engine_fingerprint, environment
    from agent.bench.transfer import load_yahpo_job, pin_threads

    pin_threads()
    spec = f"yahpo:{scenario}"
    job = load_yahpo_job(spec)
    out: dict[str, Any] = {
        "scenario": Path(scenario).name,
        "target": target,
        "dimensions": job.space.dim,
        "points_per_source": points,
        "budget": budget,
        "engine": engine_fingerprint("bench/sources.py"),
        "environment": environment(),
        "runs": [],
    }
    for size in sizes:
        start = time.perf_counter()
        kb = synthetic_history(job, target, size, points)
        history_s = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as tmp:
            models = Path(tmp) / "models"
            build_s = _build_source_models(kb, models, job, transplant=size > fit_up_to)
            if progress is not None:
                progress(
                    f"{size} sources: history written in {history_s:.0f} s, source models built in {build_s:.0f} s"
                )
            for method in methods:
                study = _timed_study(kb, spec, target, method, f"bench-{method}-{size}", budget, models)
                row = {
                    "sources": size,
                    "method": method,
                    "ran_as": study["ran_as"],
                    "history_write_s": round(history_s, 1),
                    "source_models_build_s": round(build_s, 1),
                    "source_models": "fitted" if size <= fit_up_to else "transplanted per task",
                    "prepare_s": study["prepare_s"],
                    "median_suggest_s": study["median_suggest_s"],
                    "note": study["note"],
                }
                out["runs"].append(row)
                if progress is not None:
                    progress(str(row))
    out["protocol"] = PROTOCOL
    return out


def _build_source_models(kb: Any, models: Path, job: Any, transplant: bool) -> float:
    """Builds the history's source models in ``models`` (first ``transplant``ed per task when asked),
    with the kernel a study of the space uses; the seconds it took."""
    from agent.tuning.plan import kernel_for
    from agent.tuning.source_models import transplanted_source_models, update_source_models

    start = time.perf_counter()
    kernel = kernel_for(job.space)  # the arc kernel on a conditional space, as a study's
    if transplant:
        transplanted_source_models(kb, models, job.name, job.space, kernel)
    update_source_models(kb, models, job.name, job.space, kernel)  # then the portfolios
    return time.perf_counter() - start


def _timed_study(kb: Any, spec: str, target: str, method: str, name: str, budget: int, models: Path) -> dict[str, Any]:
    """One product study of ``method`` on ``target`` over the history in ``kb``: the surrogate it ran
    as, its preparation's seconds, the median seconds of its BO suggestions and its surrogate note."""
    from agent.config import StudyRequest
    from agent.execution.progress import SilentReporter
    from agent.execution.runner import run_study
    from agent.knowledge.records import TRIAL_OK
    from agent.tuning.service import prepare_study

    req = StudyRequest(
        dataset=target,
        job=spec,
        trials=budget,
        seed=0,
        warm_start="none",
        surrogate=method,
        study_name=name,
        models_dir=str(models),
    )
    start = time.perf_counter()
    study, job_obj, data, _ = prepare_study(req, echo=lambda _: None, kb=kb)
    prepare_s = time.perf_counter() - start
    timing = run_study(study, job_obj, data, None, SilentReporter(), trace_plot=False)
    tags = kb.study_tags(kb.find_study(req.study_name))
    trials = [t for t in study.trials() if t.state == TRIAL_OK]
    origins = [t.origin for t in sorted(trials, key=lambda t: t.number)]
    bo = [s for s, o in zip(timing.ask_seconds, origins) if o.startswith("bo:")]
    return {
        "ran_as": tags.get("surrogate"),
        "prepare_s": round(prepare_s, 2),
        "median_suggest_s": round(statistics.median(bo), 3) if bo else None,
        "note": tags.get("surrogate_note", ""),
    }


def plot_sources(report: dict[str, Any], path: Path) -> Path:
    """Preparation and median suggestion seconds against the number of sources, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    methods = sorted({r["method"] for r in report["runs"]})
    for method in methods:
        rows = sorted((r for r in report["runs"] if r["method"] == method), key=lambda r: r["sources"])
        for ax, key in zip(axes, ("prepare_s", "median_suggest_s")):
            ax.plot([r["sources"] for r in rows], [r[key] for r in rows], marker="o", label=method)
    for ax, title in zip(axes, ("preparation (s)", "median suggestion (s)")):
        ax.set_xscale("log")
        ax.set_xlabel("source datasets in the history")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{report['scenario']}: {report.get('dimensions', '?')} hyperparameters", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
