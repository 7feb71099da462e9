"""`tune-agent-bench parallel`: wall time of one study run with 1, 2, ... workers.

The same study (job, dataset, trials, epochs, seed) runs once per worker count on a fresh sqlite
MLflow store under a temporary folder, through the product's loop and executors (`tune-agent start
--workers N`: Ray Core tasks; one worker runs inline). Wall time counts everything a user waits
for, Ray's start-up included; the ratio to one worker, measured in the same invocation, is the
figure (the machine is shared, so absolute seconds drift between runs). An untimed one-trial study
runs first, so that the imports of this process are paid by no count (they are paid once per
`tune-agent start`, whatever its worker count); each row splits its wall time into the study's
preparation, the wait for the workers' start (Ray's, for more than one: begun before the
preparation, as ``start`` begins it) and the trials' loop.

``wait`` (seconds, ``--wait``) makes every training epoch also wait that long without using a core
(:mod:`agent.bench.waiting_job`), as a trial bound by an accelerator or a remote read does. On a
machine with fewer cores than workers the trials then do not compete for cores, and the ratio shows
what the orchestration itself costs: Ray's start, the driver's asks and tells, the workers' hand-offs.

``process`` (``--process``) runs each count as its own ``tune-agent start`` process instead and
times it from launch to exit: every count then pays its own imports (the driver's, and Ray's
workers' beside them), which is the wall time a user waits.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.bench.waiting_job import WAITING_SPEC, waiting_env

if TYPE_CHECKING:
    from agent.config import StudyRequest


@dataclass(frozen=True)
class ParallelConfig:
    job: str = "mlp"
    dataset: str = "digits"
    trials: int = 24
    epochs: int = 20
    seed: int = 0
    workers: tuple[int, ...] = (1, 2)
    ask_ahead: tuple[int, ...] = (1,)  # each worker count above 1 runs once per value
    wait: float = 0.0  # seconds each training epoch also waits off the cores (WaitingJob)
    process: bool = False  # each count is its own `tune-agent start` process, timed from launch to exit
    cpus_per_trial: int = 1  # with Ray (counts above 1): CPUs and torch threads per trial
    gpus_per_trial: float = 0.0  # above 0: every trial trains on a GPU (a share of one on Ray)

    def resources(self, workers: int) -> Any:
        """What a trial of the ``workers`` count trains with (``start --cpus-per-trial/--gpus-per-trial``)."""
        from agent.execution.resources import TrialResources

        return TrialResources(self.cpus_per_trial if workers > 1 else 1, self.gpus_per_trial)


class _Timed:
    """An executor as the study loop uses it, timing each trial from its submission to its result
    reaching the loop: less the trial's own training (``fit_seconds``, taken where it trained), that
    is the trial's overhead — handing it to a worker, shipping what it needs, the worker's start
    when it had not started, the result's way back and any wait for a busy driver."""

    _OWN = ("inner", "_sent", "overheads")

    def __init__(self, inner: Any) -> None:
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "_sent", {})
        object.__setattr__(self, "overheads", [])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:  # what the loop sets (on_epoch, say) is the executor's
        if name in self._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)

    def submit(self, trial: Any) -> None:
        self._sent[trial.trial_id] = time.perf_counter()
        self.inner.submit(trial)

    def wait(self) -> Any:
        return self._seen(self.inner.wait())

    def poll(self) -> Any:
        ended = self.inner.poll()
        return None if ended is None else self._seen(ended)

    def _seen(self, ended: Any) -> Any:
        trial, outcome = ended
        sent = self._sent.pop(trial.trial_id, None)
        if sent is not None:
            self.overheads.append(time.perf_counter() - sent - outcome.fit_seconds)
        return ended


def _overhead_fields(overheads: list[float]) -> dict[str, Any]:
    if not overheads:
        return {}
    ordered = sorted(overheads)
    return {
        "median_trial_overhead_seconds": round(ordered[len(ordered) // 2], 3),
        "mean_trial_overhead_seconds": round(sum(ordered) / len(ordered), 3),
        "max_trial_overhead_seconds": round(ordered[-1], 3),
    }


def run_parallel_bench(
    config: ParallelConfig, out: Path | None = None, progress: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Runs the study for each worker count; writes ``out`` (JSON) when given and returns it."""
    with waiting_env(config.job, config.wait):
        return _run(config, out, progress)


def _run(config: ParallelConfig, out: Path | None, progress: Callable[[str], None]) -> dict[str, Any]:
    from agent.execution.progress import SilentReporter
    from agent.execution.runner import run_study
    from agent.tuning.service import prepare_study

    job_spec = WAITING_SPEC if config.wait > 0 else config.job
    counts = [(n, a) for n in config.workers for a in (config.ask_ahead if n > 1 else (0,))]
    if config.process:
        rows = [_start_process(config, job_spec, n, ahead, progress) for n, ahead in counts]
        return _report(config, rows, out)

    # Untimed: one study of one trial, so that the first timed count does not alone pay for this
    # process's imports (Lightning, MLflow's store, BoTorch) and the store template's first build.
    with tempfile.TemporaryDirectory(prefix="tune-agent-parallel-") as tmp:
        study, job, data, split = prepare_study(_request(config, job_spec, tmp, "warm-up", 1), echo=lambda _: None)
        run_study(study, job, data, split, SilentReporter(), trace_plot=False)
    rows = [_timed_count(config, job_spec, n, ahead, progress) for n, ahead in counts]
    return _report(config, rows, out)


def _request(config: ParallelConfig, job_spec: str, tmp: str, name: str, trials: int) -> StudyRequest:
    """The bench's study of ``trials`` trials on a fresh store in ``tmp``."""
    from agent.config import StudyRequest

    return StudyRequest(
        dataset=config.dataset,
        job=job_spec,
        trials=trials,
        epochs=config.epochs,
        seed=config.seed,
        warm_start="none",
        study_name=name,
        tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}",
        artifact_root=str(Path(tmp) / "art"),
    )


def _timed_count(
    config: ParallelConfig, job_spec: str, n: int, ahead: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    """One study with ``n`` workers asking ``ahead`` trials ahead, timed from its request."""
    from agent.execution.progress import SilentReporter
    from agent.execution.ray_start import start_workers_early
    from agent.execution.resources import ExecutionSettings
    from agent.execution.runner import run_study
    from agent.execution.workers import make_executor
    from agent.tuning.service import prepare_study

    with tempfile.TemporaryDirectory(prefix="tune-agent-parallel-") as tmp:
        start = time.perf_counter()
        resources = config.resources(n)
        early = start_workers_early(n, None, job_spec, resources)  # as `tune-agent start` begins it
        request = _request(config, job_spec, tmp, f"parallel-{n}", config.trials)
        study, job, data, split = prepare_study(request, echo=lambda _: None)
        prepared = time.perf_counter()
        settings = ExecutionSettings(workers=n, ask_ahead=ahead, resources=resources)
        executor = _Timed(make_executor(study, job, data, split, settings, started=early))
        started = time.perf_counter()
        timing = run_study(study, job, data, split, SilentReporter(), trace_plot=False, executor=executor)
        wall = time.perf_counter() - start
        trials, best = _counted(study.trials())
    row = {
        "workers": n,
        "ask_ahead": ahead,
        "wall_seconds": round(wall, 2),
        "fit_seconds": round(timing.fit_seconds, 2),
        "prepare_seconds": round(prepared - start, 2),
        "executor_start_seconds": round(started - prepared, 2),
        "ask_seconds": round(sum(timing.ask_seconds), 2),
        "trials": len(trials),
        "best": best,
        "median_ask_seconds": round(sorted(timing.ask_seconds)[len(timing.ask_seconds) // 2], 3),
        "batched_tells": timing.batched_tells,
        # the first trial's result, from the request: Ray's start and its workers' imports
        # delay it; inline, one trial's training does
        "first_result_seconds": round(started - start + (timing.first_result_seconds or 0.0), 2),
        **_overhead_fields(executor.overheads),
        # processes the trials trained in (Ray's workers; inline, this one)
        "worker_processes": len(set(getattr(executor.inner, "pids", []))) or 1,
    }
    progress(
        f"{n} worker(s), ask-ahead {ahead}: {wall:.1f} s wall (prepare {row['prepare_seconds']} s, "
        "workers' start "
        f"{row['executor_start_seconds']} s, asks {row['ask_seconds']} s), {len(trials)} trials, "
        f"best {row['best']}, trial overhead median {row.get('median_trial_overhead_seconds')} s"
    )
    return row


def _start_process(
    config: ParallelConfig, job_spec: str, workers: int, ahead: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    """One ``tune-agent start`` process on a fresh store: its wall time from launch to exit."""
    import subprocess

    from agent.errors import TuneAgentError
    from agent.knowledge import open_knowledge_base

    with tempfile.TemporaryDirectory(prefix="tune-agent-parallel-") as tmp:
        uri, name = f"sqlite:///{Path(tmp) / 'mlflow.db'}", f"parallel-{workers}"
        command = _start_command(config, job_spec, workers, ahead, name, uri, Path(tmp) / "art")
        start = time.perf_counter()
        done = subprocess.run(command, cwd=tmp, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise TuneAgentError(f"`tune-agent start --workers {workers}` exited {done.returncode}: {last}")
        kb = open_knowledge_base(uri, str(Path(tmp) / "art"))
        record = kb.find_study(name)
        trials, best = _counted(kb.trials(record) if record else [])
    row = {
        "workers": workers,
        "ask_ahead": ahead,
        "wall_seconds": round(wall, 2),
        "fit_seconds": round(sum(t.duration or 0.0 for t in trials), 2),
        "trials": len(trials),
        "best": best,
    }
    progress(
        f"{workers} worker(s), ask-ahead {ahead}: `tune-agent start` {wall:.1f} s from launch to exit, "
        f"{len(trials)} trials, best {row['best']}"
    )
    return row


def _start_command(
    config: ParallelConfig, job_spec: str, workers: int, ahead: int, name: str, uri: str, artifacts: Path
) -> list[str]:
    """The ``tune-agent start`` command line of one worker count."""
    import sys

    command = [
        sys.executable,
        "-m",
        "agent.cli",
        "start",
        "--dataset",
        config.dataset,
        "--job",
        job_spec,
        "--trials",
        str(config.trials),
        "--epochs",
        str(config.epochs),
        "--seed",
        str(config.seed),
        "--warm-start",
        "none",
        "--study-name",
        name,
        "--tracking-uri",
        uri,
        "--artifact-root",
        str(artifacts),
        "--workers",
        str(workers),
        "--ask-ahead",
        str(ahead),
        "--gpus-per-trial",
        repr(config.gpus_per_trial),
    ]
    if workers > 1:
        command += ["--cpus-per-trial", str(config.cpus_per_trial)]
    return command


def _counted(trials: list[Any]) -> tuple[list[Any], float | None]:
    """The trials that count in the budget, and the lowest value of the finished ones."""
    from agent.knowledge.records import COUNTED_STATES, TRIAL_OK

    counted = [t for t in trials if t.state in COUNTED_STATES]
    ok = [t.value for t in counted if t.state == TRIAL_OK and t.value is not None]
    return counted, min(ok) if ok else None


def _report(config: ParallelConfig, rows: list[dict[str, Any]], out: Path | None) -> dict[str, Any]:
    base = rows[0]["wall_seconds"]
    for row in rows:
        row["wall_ratio"] = round(row["wall_seconds"] / base, 3)
    protocol = (
        "one `tune-agent start` process per worker count, same seed, fresh sqlite MLflow store each; wall "
        "time from launch to exit, imports and Ray's start included (what a user waits)"
        if config.process
        else "one study per worker count, same seed, fresh sqlite MLflow store each, after an untimed one-trial "
        "study that pays this process's imports (not the Ray workers'); wall time from request to last trial "
        "logged, Ray start-up included"
    )
    wait = f"; every training epoch also waits {config.wait:g} s off the cores" if config.wait > 0 else ""
    gpu = {}
    if config.gpus_per_trial > 0:
        import torch

        gpu = {"gpu": torch.cuda.get_device_name(0)}
    report = {
        "config": asdict(config),
        "cpu_count": os.cpu_count(),
        **gpu,
        "runs": rows,
        "protocol": protocol + "; ratio to the first worker count" + wait,
    }
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
