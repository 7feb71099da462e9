"""`tune-agent bench parallel`: wall time of one study run with 1, 2, ... workers.

The same study (job, dataset, trials, epochs, seed) runs once per worker count on a fresh sqlite
MLflow store under a temporary folder, through the product's loop and executors (`tune-agent start
--workers N`: Ray Core tasks; one worker runs inline). Wall time counts everything a user waits
for, Ray's start-up included; the ratio to one worker, measured in the same invocation, is the
figure (the machine is shared, so absolute seconds drift between runs). An untimed one-trial study
runs first, so that the imports of this process are paid by no count (they are paid once per
`tune-agent start`, whatever its worker count); each row splits its wall time into the study's
preparation, the wait for the workers' start (Ray's, for more than one: begun before the
preparation, as ``start`` begins it) and the trials' loop.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence


@dataclass(frozen=True)
class ParallelConfig:
    job: str = "mlp"
    dataset: str = "digits"
    trials: int = 24
    epochs: int = 20
    seed: int = 0
    workers: tuple[int, ...] = (1, 2)
    ask_ahead: tuple[int, ...] = (1,)  # each worker count above 1 runs once per value


def run_parallel_bench(config: ParallelConfig, out: Path | None = None,
                       progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Runs the study for each worker count; writes ``out`` (JSON) when given and returns it."""
    import os

    from agent.config import StudyConfig
    from agent.knowledge.base import COUNTED_STATES, TRIAL_OK
    from agent.tuning.progress import SilentReporter
    from agent.tuning.ray_start import start_workers_early
    from agent.tuning.runner import run_study
    from agent.tuning.service import prepare_study
    from agent.tuning.workers import make_executor

    def request(tmp: str, name: str, trials: int) -> StudyConfig:
        return StudyConfig(dataset=config.dataset, job=config.job, trials=trials, epochs=config.epochs,
                           seed=config.seed, warm_start="none", study_name=name,
                           tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}", artifact_root=str(Path(tmp) / "art"))

    # Untimed: one study of one trial, so that the first timed count does not alone pay for this
    # process's imports (Lightning, MLflow's store, BoTorch) and the store template's first build.
    with tempfile.TemporaryDirectory(prefix="tune-agent-parallel-") as tmp:
        study, job, data, split = prepare_study(request(tmp, "warm-up", 1), echo=lambda _: None)
        run_study(study, job, data, split, SilentReporter(), trace_plot=False)
    rows = []
    for n, ahead in [(n, a) for n in config.workers for a in (config.ask_ahead if n > 1 else (0,))]:
        with tempfile.TemporaryDirectory(prefix="tune-agent-parallel-") as tmp:
            start = time.perf_counter()
            early = start_workers_early(n, None, config.job)  # as `tune-agent start` begins it
            study, job, data, split = prepare_study(request(tmp, f"parallel-{n}", config.trials), echo=lambda _: None)
            prepared = time.perf_counter()
            executor = make_executor(study, job, data, split, n, ask_ahead=ahead, started=early)
            started = time.perf_counter()
            timing = run_study(study, job, data, split, SilentReporter(), trace_plot=False, executor=executor)
            wall = time.perf_counter() - start
            trials = [t for t in study.trials() if t.state in COUNTED_STATES]
            ok = [t.value for t in trials if t.state == TRIAL_OK and t.value is not None]
        rows.append({"workers": n, "ask_ahead": ahead, "wall_seconds": round(wall, 2), "fit_seconds": round(timing.fit_seconds, 2),
                     "prepare_seconds": round(prepared - start, 2), "executor_start_seconds": round(started - prepared, 2),
                     "ask_seconds": round(sum(timing.ask_seconds), 2), "trials": len(trials),
                     "best": min(ok) if ok else None,
                     "median_ask_seconds": round(sorted(timing.ask_seconds)[len(timing.ask_seconds) // 2], 3)})
        progress(f"{n} worker(s), ask-ahead {ahead}: {wall:.1f} s wall (prepare {rows[-1]['prepare_seconds']} s, workers' start "
                 f"{rows[-1]['executor_start_seconds']} s, asks {rows[-1]['ask_seconds']} s), {len(trials)} trials, "
                 f"best {rows[-1]['best']}")
    base = rows[0]["wall_seconds"]
    for row in rows:
        row["wall_ratio"] = round(row["wall_seconds"] / base, 3)
    report = {"config": asdict(config), "cpu_count": os.cpu_count(), "runs": rows,
              "protocol": "one study per worker count, same seed, fresh sqlite MLflow store each, after an untimed "
                          "one-trial study that pays this process's imports; wall time from request to last "
                          "trial logged, Ray start-up included; ratio to the first worker count"}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def parse_workers(text: str, option: str = "--workers", least: int = 1) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``; the first is the baseline. ``option`` and ``least`` name the
    option in the error and its smallest value."""
    from agent.errors import TuneAgentError

    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise TuneAgentError(f"{option} takes comma-separated counts like 1,2,4, got {text!r}") from None
    if not values or min(values) < least:
        raise TuneAgentError(f"{option} takes counts of at least {least}, got {text!r}")
    return values


__all__: Sequence[str] = ("ParallelConfig", "run_parallel_bench", "parse_workers")
