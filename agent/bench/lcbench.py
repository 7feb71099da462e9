"""Leave-one-task-out transfer benchmark on LCBench (Zimmer et al. 2021) via YAHPO Gym (Pfisterer et al. 2022).

This module owns the protocol, the parallel harness and the report:

- every one of the 34 tasks is the target once; each other task contributes a history of
  ``history_size`` (100) configurations drawn uniformly in the unit cube and snapped to the space,
  with a fixed seed shared by all methods (:func:`make_histories`);
- target: ``val_accuracy`` at the final epoch (52), maximised; 30 trials per run, the initial design
  included; 5 seeds per task;
- regret after ``t`` trials is ``(max - best_so_far) / (max - min)`` clipped below at 0, where ``max``
  and ``min`` are over 5000 random configurations (fixed seed) of that task;
- reported: mean normalised regret at trials 1, 3, 5, 10, 20, 30 and the average rank of the methods at
  trial 5 (ranked per task and seed, ties averaged), plus the median seconds per suggestion.

Runs are parallel over (task, seed) with a ``ProcessPoolExecutor``; each worker loads the scenario
from its folder and rebuilds methods from their (picklable) factories, so nothing live crosses
processes. Quick mode keeps 4 tasks spread over the instance list and 2 seeds.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from agent.bench.methods import METHODS, Method, make_methods  # noqa: F401
from agent.bench.yahpo import YahpoScenario
from agent.space import SearchSpace

DEFAULT_FOLDER = Path("/work/shared/benchmarks/yahpo/lcbench")
Factory = Callable[[SearchSpace], Method]
QUICK_TASKS, QUICK_SEEDS = 4, 2
RANK_AT = 5


@dataclass(frozen=True)
class BenchConfig:
    tasks: list[str] | None = None  # None = every instance
    seeds: int = 5
    budget: int = 30
    history_size: int = 100
    report_at: tuple[int, ...] = (1, 3, 5, 10, 20, 30)
    workers: int = 2  # <= 1 runs in this process
    quick: bool = False
    target: str = "val_accuracy"
    history_seed: int = 0
    reference_size: int = 5000
    reference_seed: int = 12345
    control: str = "none"  # "shuffled": each source's responses permuted (negative-transfer control)

    def resolve(self, instances: Sequence[str]) -> BenchConfig:
        """Explicit task list and seed count (quick mode: 4 tasks spread over the list, 2 seeds)."""
        if self.tasks is not None:
            unknown = sorted(set(self.tasks) - set(instances))
            if unknown:
                raise ValueError(f"unknown tasks {unknown}")
            return self
        if not self.quick:
            return replace(self, tasks=list(instances))
        step = max(len(instances) // QUICK_TASKS, 1)
        return replace(self, tasks=list(instances)[::step][:QUICK_TASKS], seeds=min(self.seeds, QUICK_SEEDS))


# -- protocol ------------------------------------------------------------------------------------
def make_histories(scenario: YahpoScenario, history_size: int, seed: int,
                   target: str = "val_accuracy") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per task: ``history_size`` uniform cube points (snapped) and their target values.

    Each task draws from its own stream ``(seed, task index)``, so tasks see different configurations
    and a task's history does not depend on which other tasks are in the study.
    """
    out = {}
    for i, task in enumerate(scenario.instances):
        U = scenario.space.snap(np.random.default_rng([seed, i]).random((history_size, scenario.space.dim)))
        out[task] = (U, scenario.evaluate(task, U, target=target))
    return out


def apply_control(histories: dict[str, tuple[np.ndarray, np.ndarray]], control: str, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The negative-transfer control: each task's responses shuffled over its configurations, so
    the history says nothing true about any target (the target's own evaluations are untouched)."""
    if control == "none":
        return histories
    if control != "shuffled":
        raise ValueError(f"unknown control {control!r}")
    return {t: (U, np.random.default_rng([seed, 99, i]).permutation(y)) for i, (t, (U, y)) in enumerate(histories.items())}


def reference_range(scenario: YahpoScenario, task: str, config: BenchConfig) -> tuple[float, float]:
    """Min and max of the target over ``reference_size`` random configurations of ``task``."""
    key = (id(scenario), config.reference_size, config.reference_seed)
    if _CACHE.get("reference_key") != key:  # decoding is the slow part: once per process
        U = np.random.default_rng(config.reference_seed).random((config.reference_size, scenario.space.dim))
        _CACHE["reference_key"] = key
        _CACHE["reference_configs"] = [scenario.space.decode(u) for u in U]
    y = scenario.evaluate(task, _CACHE["reference_configs"], target=config.target)
    return float(y.min()), float(y.max())


def normalised_regret(y: np.ndarray, low: float, high: float) -> np.ndarray:
    """Best-so-far regret per trial, scaled by the task's reference range, clipped below at 0."""
    best = np.maximum.accumulate(np.asarray(y, dtype=float))
    return np.clip((high - best) / max(high - low, 1e-12), 0.0, None)


def run_method(scenario: YahpoScenario, task: str, factory: Factory, history: list, seed: int,
               config: BenchConfig) -> tuple[np.ndarray, list[float]]:
    """One optimisation run: target values per trial and seconds per suggestion."""
    method = factory(scenario.space)
    method.start(scenario.instances.index(task), history, seed)
    U, y, seconds = np.empty((0, scenario.space.dim)), np.empty(0), []
    for _ in range(config.budget):
        start = time.perf_counter()
        u = method.suggest(U, y)
        seconds.append(time.perf_counter() - start)
        u = scenario.space.snap(u)
        U = np.vstack([U, u])
        y = np.append(y, scenario.evaluate(task, u, target=config.target))
    return y, seconds


# -- workers -------------------------------------------------------------------------------------
_CACHE: dict[str, Any] = {}  # per process: the scenario, its histories and the reference points


@dataclass(frozen=True)
class _Job:
    folder: str
    targets: tuple[str, ...]
    cont_names: tuple[str, ...]
    task: str
    seed: int
    methods: dict[str, Factory]
    config: BenchConfig


def _worker_init() -> None:
    import torch

    torch.set_num_threads(1)


def _worker_state(job: _Job) -> tuple[YahpoScenario, dict]:
    key = (job.folder, job.targets, job.cont_names, job.config.history_size, job.config.history_seed, job.config.control)
    if _CACHE.get("key") != key:
        scenario = YahpoScenario.load(Path(job.folder), job.targets, job.cont_names)
        histories = make_histories(scenario, job.config.history_size, job.config.history_seed, job.config.target)
        histories = apply_control(histories, job.config.control, job.config.history_seed)
        _CACHE.update(key=key, scenario=scenario, histories=histories)
    return _CACHE["scenario"], _CACHE["histories"]


def _run_job(job: _Job) -> dict[str, Any]:
    """All methods on one (task, seed): regret curves and suggestion times per method."""
    from agent.tuning.bo import torch_threads

    scenario, histories = _worker_state(job)
    history = [histories[t] for t in scenario.instances if t != job.task]
    low, high = reference_range(scenario, job.task, job.config)
    out: dict[str, Any] = {"task": job.task, "seed": job.seed, "methods": {}}
    with torch_threads(1):
        for name, factory in job.methods.items():
            y, seconds = run_method(scenario, job.task, factory, history, job.seed, job.config)
            out["methods"][name] = {"regret": normalised_regret(y, low, high).tolist(), "seconds": seconds}
    return out


def protocol_key(scenario: YahpoScenario, config: BenchConfig, method: str) -> str:
    """What makes a run's result reproducible: scenario, protocol settings, control and method."""
    import hashlib

    fields = {k: v for k, v in asdict(config).items() if k not in ("tasks", "seeds", "workers", "quick")}
    blob = json.dumps({"scenario": scenario.folder.name, "method": method, **fields}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _load_journal(path: Path | None) -> dict[tuple[str, str, int], dict[str, Any]]:
    done: dict[tuple[str, str, int], dict[str, Any]] = {}
    if path is None or not path.exists():
        return done
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
            done[(row["key"], row["task"], int(row["seed"]))] = row["result"]
        except (ValueError, KeyError):
            continue  # a line cut short by an interruption
    return done


def run_benchmark(scenario: YahpoScenario, methods: dict[str, Factory], config: BenchConfig,
                  progress: Callable[[str], None] | None = None, journal: Path | None = None) -> dict[str, Any]:
    """Runs every method on every (task, seed); returns curves (`runs x budget`) and timings.

    ``progress`` gets one line per finished (task, seed), in completion order. ``journal`` (a JSONL
    file) makes the run resumable: every finished (method, task, seed) is appended with its
    :func:`protocol_key`, and results already there are reused instead of recomputed, so an
    interrupted benchmark continues where it stopped. Seeds are the outer loop, so a partial run
    covers every task. ``wall_seconds`` counts only this call's work; ``runs_from_journal`` says,
    per method, how many runs were reused instead.
    """
    config = config.resolve(scenario.instances)
    keys = {m: protocol_key(scenario, config, m) for m in methods}
    done = _load_journal(journal)
    if journal is not None and journal.exists() and journal.stat().st_size:
        with journal.open("rb+") as fh:  # a line cut by an interruption must not swallow the next one
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
    pairs = [(task, seed) for seed in range(config.seeds) for task in config.tasks or []]
    jobs = []
    for task, seed in pairs:
        todo = {m: f for m, f in methods.items() if (keys[m], task, seed) not in done}
        if todo:
            jobs.append(_Job(str(scenario.folder), tuple(scenario.targets), tuple(scenario.cont_names), task, seed,
                             todo, config))
    start = time.perf_counter()
    if progress is not None and len(jobs) < len(pairs):
        progress(f"{len(pairs) - len(jobs)} of {len(pairs)} (task, seed) runs taken from {journal}")

    def record(run: dict[str, Any]) -> None:
        for m, r in run["methods"].items():
            done[(keys[m], run["task"], run["seed"])] = r
        if journal is not None:
            journal.parent.mkdir(parents=True, exist_ok=True)
            with journal.open("a") as fh:
                for m, r in run["methods"].items():
                    fh.write(json.dumps({"key": keys[m], "method": m, "task": run["task"], "seed": run["seed"],
                                         "result": r}) + "\n")
        if progress is not None:
            finals = ", ".join(f"{m} {r['regret'][-1]:.3f}" for m, r in run["methods"].items())
            progress(f"[{finished[0]}/{len(jobs)}] task {run['task']} seed {run['seed']} "
                     f"({time.perf_counter() - start:.0f} s): regret@{config.budget} {finals}")

    finished = [0]
    if config.workers <= 1:
        for job in jobs:
            finished[0] += 1
            record(_run_job(job))
    else:
        with ProcessPoolExecutor(config.workers, mp_context=get_context("spawn"), initializer=_worker_init) as pool:
            for future in as_completed([pool.submit(_run_job, job) for job in jobs]):
                finished[0] += 1
                record(future.result())
    runs = [{"task": t, "seed": sd, "methods": {m: done[(keys[m], t, sd)] for m in methods}} for t, sd in pairs]
    wall = time.perf_counter() - start
    return {
        "scenario": scenario.folder.name,
        "config": {**asdict(config), "report_at": list(config.report_at)},
        "tasks": list(config.tasks or []),
        "seeds": config.seeds,
        "runs": [(r["task"], r["seed"]) for r in runs],
        "regret": {m: [r["methods"][m]["regret"] for r in runs] for m in methods},
        "suggest_seconds": {m: statistics.median(s for r in runs for s in r["methods"][m]["seconds"])
                            for m in methods},
        "wall_seconds": wall,
        # per method: the (task, seed) runs taken from the journal, not computed (and timed) here
        "runs_from_journal": {m: len(pairs) - sum(m in job.methods for job in jobs) for m in methods},
    }


# -- report --------------------------------------------------------------------------------------
def average_ranks(regret: dict[str, list[list[float]]], trial: int) -> dict[str, float]:
    """Mean rank of each method (1 = lowest regret) at ``trial``, ties averaged, over all runs."""
    from scipy.stats import rankdata

    names = list(regret)
    at = np.array([[curve[trial - 1] for curve in regret[m]] for m in names])  # methods x runs
    ranks = rankdata(at, axis=0, method="average")
    return {m: float(r) for m, r in zip(names, ranks.mean(axis=1))}


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """The metrics file's content; trial counts beyond the budget are left out."""
    budget = len(next(iter(result["regret"].values()))[0])
    ranks = average_ranks(result["regret"], min(RANK_AT, budget))
    methods = {}
    for name, curves in result["regret"].items():
        curves_arr = np.asarray(curves)
        entry = {f"regret@{k}": round(float(curves_arr[:, k - 1].mean()), 4)
                 for k in result["config"]["report_at"] if k <= budget}
        methods[name] = {**entry, f"rank@{RANK_AT}": round(ranks[name], 4)}
    return {
        "tasks": len(result["tasks"]),
        "seeds": result["seeds"],
        "methods": methods,
        "suggest_seconds": {m: round(s, 5) for m, s in result["suggest_seconds"].items()},
        "wall_seconds": round(result["wall_seconds"], 2),
        "runs_from_journal": result.get("runs_from_journal", {}),
    }


def write_report(result: dict[str, Any], metrics_path: Path, plots_dir: Path) -> None:
    """Writes metrics/lcbench.json, plots/lcbench_regret.csv and plots/lcbench_regret.png."""
    metrics_path, plots_dir = Path(metrics_path), Path(plots_dir)
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    plots_dir.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps(summarise(result), indent=2) + "\n")
    means = {m: np.asarray(c).mean(axis=0) for m, c in result["regret"].items()}
    with open(plots_dir / "lcbench_regret.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["trial", *means])  # wide: one column per method, one DVC plot line each
        budget = len(next(iter(means.values())))
        writer.writerows([t + 1, *(round(float(c[t]), 6) for c in means.values())] for t in range(budget))
    _plot(means, plots_dir / "lcbench_regret.png", len(result["tasks"]), result["seeds"])


def _plot(means: dict[str, np.ndarray], path: Path, tasks: int, seeds: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, curve in means.items():
        # A log axis cannot show 0: regrets below 1e-4 are drawn at 1e-4.
        ax.plot(np.arange(1, len(curve) + 1), np.maximum(curve, 1e-4), label=m)
    ax.set(yscale="log", xlabel="trials", ylabel="mean normalised regret",
           title=f"LCBench (YAHPO Gym), {tasks} tasks x {seeds} seeds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m agent.bench.lcbench [--quick]``: runs the baselines and writes the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--tasks", type=int, default=None, help="first N tasks (default: all)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    scenario = YahpoScenario.load(args.folder)
    tasks = scenario.instances[: args.tasks] if args.tasks else None
    config = BenchConfig(tasks=tasks, seeds=args.seeds, workers=args.workers, quick=args.quick)
    result = run_benchmark(scenario, make_methods(args.methods), config)
    write_report(result, args.out / "metrics" / "lcbench.json", args.out / "plots")
    print(json.dumps(summarise(result), indent=2))


if __name__ == "__main__":
    main()
