"""``tune-agent-bench zero-shot``: the zero-shot start's ceiling on a YAHPO scenario (see
:mod:`agent.tuning.zero_shot`), with the leave-one-task-out histories of ``bench lcbench``."""

from __future__ import annotations

from typing import Any

import numpy as np

from agent.bench.transfer import BenchConfig, load_yahpo_job, make_histories, reference_range

PROTOCOL = (
    "leave-one-task-out on every task of the scenario with the histories of `bench lcbench` (100 "
    "random configurations per task, history seed 0): per target, the other tasks' source GPs (the "
    "product's fits on normal scores) predict the pooled history configurations (and a 2,048-point "
    "scrambled Sobol set), normalised per source three ways; the greedy portfolio of 10 (the "
    "product's rule) is read at the target's true values; regret scaled as in `bench lcbench` "
    "(5,000 random configurations). 'oracle': the same rule on the other tasks' true values. "
    "'best fixed first': the least mean true regret of one candidate over every task, target included"
)


def run_zero_shot_bench(scenario: str, say: Any = print) -> dict[str, Any]:
    from agent.bench.fingerprint import engine_fingerprint, environment
    from agent.tuning.zero_shot import zero_shot_table

    config = BenchConfig(scenario=scenario)
    job = load_yahpo_job(config.job_spec)
    sign = 1.0 if job.mode == "max" else -1.0
    say(f"{job.name}: {len(job.scenario.instances)} tasks; fitting source GPs and reading true values")
    histories = {t: (U, sign * y) for t, (U, y) in make_histories(job, config).items()}
    ranges = {t: reference_range(job, t, config) for t in histories}
    table = zero_shot_table(
        job.space,
        histories,
        lambda task, U: sign * np.asarray(job.evaluate_many(U, job.task(task)), dtype=float),
        ranges,
    )
    return {
        "command": f"tune-agent-bench zero-shot --scenario {scenario}",
        **table,
        "engine": engine_fingerprint("bench/zero_shot.py"),
        "environment": environment(),
        "protocol": PROTOCOL,
    }
