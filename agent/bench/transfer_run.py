"""The transfer benchmark's driver: every (task, seed, method) run of :mod:`agent.bench.transfer`,
journalled so an interrupted benchmark resumes, with TNP folds meta-trained first."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from agent.bench.transfer import (
    BenchConfig,
    RunArgs,
    check_methods,
    fold_of,
    load_yahpo_job,
    pin_threads,
    run_one,
    train_tnp_folds,
)


def protocol_key(config: BenchConfig, method: str) -> str:
    """What makes a run's result reproducible: scenario, protocol settings, control, method, the
    method's revision in the surrogate registry and the engine's code (:mod:`agent.bench.fingerprint`)."""
    from agent.bench.fingerprint import run_key
    from agent.tuning.plan import surrogate_revision

    fields = {
        k: v
        for k, v in asdict(config).items()
        if k not in ("tasks", "seeds", "workers", "quick", "cache_dir")
        and not (k == "batch" and v == 1)
        and not (k == "pending" and v == "auto")
        and not (k == "ask_ahead" and v == 0)
        and not (k == "sources" and v is None)
        and not (k == "random_every" and v is None)
    }
    fields["scenario"] = Path(config.scenario).name
    revision = surrogate_revision(method)
    return run_key(
        "bench/transfer.py",
        {"method": method, "engine": "study", **fields, **({"revision": revision} if revision > 1 else {})},
    )


def _load_journal(path: Path | None) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Every finished (protocol key, task, seed) the journal holds: the keys of every method."""
    from agent.bench.fingerprint import journal_rows

    done: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in journal_rows(path):
        try:
            done[(row["key"], row["task"], int(row["seed"]))] = row["result"]
        except (ValueError, KeyError, TypeError):
            continue
    return done


def run_benchmark(
    methods: Sequence[str],
    config: BenchConfig,
    progress: Callable[[str], None] | None = None,
    journal: Path | None = None,
) -> dict[str, Any]:
    """Runs every method on every (task, seed); returns curves (`runs x budget`) and timings.

    ``journal`` (a JSONL file) makes the run resumable: every finished (method, task, seed) is
    appended with its :func:`protocol_key` and reused by the next call. Seeds are the outer loop,
    so a partial run covers every task.
    """
    from agent.bench.fingerprint import end_journal_line

    check_methods(methods)
    job = load_yahpo_job(config.job_spec)
    config = config.resolve(job.scenario.instances)
    keys = {m: protocol_key(config, m) for m in methods}
    done = _load_journal(journal)
    end_journal_line(journal)
    pairs = [(task, seed) for seed in range(config.seeds) for task in config.tasks or ()]
    todo = {(task, seed): tuple(m for m in methods if (keys[m], task, seed) not in done) for task, seed in pairs}
    fold = {task: fold_of(job.scenario.instances.index(task)) for task in config.tasks or ()}
    folds = train_tnp_folds(config, sorted({fold[t] for (t, _), ms in todo.items() if "tnp" in ms}), progress)
    jobs = [RunArgs(task, seed, ms, config, folds.get(fold[task])) for (task, seed), ms in todo.items() if ms]
    start = time.perf_counter()
    if progress is not None and len(jobs) < len(pairs):
        progress(f"{len(pairs) - len(jobs)} of {len(pairs)} (task, seed) runs taken from {journal}")
    _run_all(jobs, config.workers, _Recorder(done, keys, journal, progress, len(jobs), config.budget, start))
    runs: list[dict[str, Any]] = [
        {"task": t, "seed": sd, "methods": {m: done[(keys[m], t, sd)] for m in methods}} for t, sd in pairs
    ]
    return {
        "scenario": Path(config.scenario).name,
        "job": job.name,
        "config": {**asdict(config), "report_at": list(config.report_at)},
        "tasks": list(config.tasks or ()),
        "seeds": config.seeds,
        "runs": [(r["task"], r["seed"]) for r in runs],
        "regret": {m: [r["methods"][m]["regret"] for r in runs] for m in methods},
        "suggest_seconds": {m: statistics.median(s for r in runs for s in r["methods"][m]["seconds"]) for m in methods},
        **{
            name: {
                m: statistics.median(found)
                for m in methods
                if (found := [r["methods"][m][key] for r in runs if key in r["methods"][m]])
            }
            for name, key in (("first_trial_seconds", "first_trial_s"), ("source_models_seconds", "source_models_s"))
        },
        "wall_seconds": time.perf_counter() - start,
        "runs_from_journal": {m: len(pairs) - sum(m in j.methods for j in jobs) for m in methods},
    }


@dataclass
class _Recorder:
    """Takes each finished (task, seed) run: into ``done``, appended to the journal (when there is
    one) and said, with its place among the ``total`` runs and the seconds since ``start``."""

    done: dict[tuple[str, str, int], dict[str, Any]]
    keys: Mapping[str, str]
    journal: Path | None
    progress: Callable[[str], None] | None
    total: int
    budget: int
    start: float
    finished: int = 0

    def __call__(self, run: dict[str, Any]) -> None:
        self.finished += 1
        keys = self.keys
        for m, r in run["methods"].items():
            self.done[(keys[m], run["task"], run["seed"])] = r
        if self.journal is not None:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            with self.journal.open("a") as fh:
                for m, r in run["methods"].items():
                    fh.write(
                        json.dumps({"key": keys[m], "method": m, "task": run["task"], "seed": run["seed"], "result": r})
                        + "\n"
                    )
        if self.progress is not None:
            finals = ", ".join(f"{m} {r['regret'][-1]:.3f}" for m, r in run["methods"].items())
            self.progress(
                f"[{self.finished}/{self.total}] task {run['task']} seed {run['seed']} "
                f"({time.perf_counter() - self.start:.0f} s): regret@{self.budget} {finals}"
            )


def _run_all(jobs: Sequence[RunArgs], workers: int, record: Callable[[dict[str, Any]], None]) -> None:
    """Every job, in this process (``workers`` <= 1) or ``workers`` spawned processes at a time,
    each result recorded as it comes."""
    if workers <= 1:
        pin_threads()
        for j in jobs:
            record(run_one(j))
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=pin_threads) as pool:
            for future in as_completed([pool.submit(run_one, j) for j in jobs]):
                record(future.result())
