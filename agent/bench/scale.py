"""`tune-agent-bench scale`: seconds per suggestion as the history grows (the product's studies).

For each history size, every other task of the scenario contributes that many random
configurations (imported into an in-memory knowledge base, as in the transfer benchmark) and one
study per method runs on the target task. Reported per method and size: the median and largest
seconds of the BO steps' ``ask`` (the initial design left out) and the whole study's seconds, which
include the one-off preparation (source GP fits, portfolio; ``tnp`` meta-training is done before
the clock starts and cached). Gp runs in the same process as a baseline, since this machine is
shared and noisy. ``ran_as`` is the surrogate the study resolved to.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from agent.bench.transfer import (
    BenchConfig,
    fold_of,
    history_store,
    load_yahpo_job,
    make_histories,
    pin_threads,
    run_method,
    tnp_fold_dir,
)


def measure_scale(
    scenario: str,
    task: str,
    sizes: Sequence[int],
    methods: Sequence[str],
    budget: int = 15,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    from agent.tuning.plan import source_cache

    pin_threads()
    from agent.bench.fingerprint import engine_fingerprint, environment

    out: dict[str, Any] = {
        "scenario": scenario,
        "task": task,
        "budget": budget,
        "engine": engine_fingerprint("bench/transfer.py"),
        "environment": environment(),
        "runs": [],
    }
    for size in sizes:
        config = BenchConfig(scenario=scenario, history_size=size)
        job = load_yahpo_job(config.job_spec)
        job.task(task)
        histories = make_histories(job, config)
        sources = [t for t in job.scenario.instances if t != task]
        fits = source_cache()
        for method in methods:
            models = "models"
            if method == "tnp":  # the fold's network, meta-trained on the other folds' histories of this size
                models = str(tnp_fold_dir(job, histories, fold_of(job.scenario.instances.index(task)), config))
            kb = history_store(job, histories, sources)
            start = time.perf_counter()
            _, _, seconds = run_method(config.job_spec, task, method, kb, 0, budget, models, fits)
            used = kb.study_tags(kb.find_study(f"bench-{method}-{task}-0"))["surrogate"]
            bo = seconds[5:] if used in ("gp", "-") else seconds[1:]
            row = {
                "method": method,
                "ran_as": used,
                "history_points": size * len(sources),
                "median_ask_s": round(statistics.median(bo), 3),
                "max_ask_s": round(max(bo), 3),
                "study_s": round(time.perf_counter() - start, 1),
            }
            out["runs"].append(row)
            if progress is not None:
                progress(str(row))
    return out
