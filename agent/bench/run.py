"""`tune-agent-bench lcbench`: the transfer benchmark on any YAHPO scenario, report included."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from agent.bench.fingerprint import engine_fingerprint, environment
from agent.bench.report import summarise, write_report
from agent.bench.transfer import QUICK_SEEDS, BenchConfig, check_methods, load_yahpo_job
from agent.bench.transfer_run import run_benchmark
from agent.errors import TuneAgentError

PROTOCOL = (
    "YAHPO Gym scenario, leave-one-task-out, {history} random history configs per source task imported into "
    "an in-memory knowledge base, each run a product study (tune-agent start --job yahpo:...), budget {budget}, "
    "{batch} trial(s) in flight{pending}, regret normalised by {reference} random configs"
)


# long: the command's 21 options arrive as parameters; its signature and docstring are half its lines
def run_transfer_benchmark(
    methods: Sequence[str],
    out: Path,
    folder: str | None = None,
    target: str | None = None,
    maximize: bool | None = None,
    fidelity: Mapping[str, float] | None = None,
    quick: bool = False,
    seeds: int | None = None,
    tasks: int | None = None,
    budget: int = 30,
    workers: int = 2,
    control: str = "none",
    progress: Callable[[str], None] | None = None,
    fresh: bool = False,
    cache_dir: str = "data/bench-cache",
    batch: int = 1,
    pending: str = "auto",
    tag: str | None = None,
    ask_ahead: int = 0,
    history_size: int = 100,
    sources: int | None = None,
    random_every: int | None = None,
) -> dict[str, Any]:
    """Runs the benchmark and writes ``out/metrics/<scenario>[_control][_batchN[_pending][_aheadK]][_tag].json``
    and the plots; with ``batch`` > 1 the same runs one trial at a time are its baseline. ``tag``
    names a side run (other methods beside the main table) so that it writes files of its own;
    ``history_size`` (configurations per source) other than 100 and ``sources`` (source tasks per
    run) add ``_historyN`` / ``_sourcesK`` to the names, ``random_every`` (``start --random-every``
    for every BO study, None: the product's default) ``_random_everyN``.

    Finished runs are journalled in ``out/data/bench-runs/<scenario>[_control].jsonl`` and reused by
    the next call with the same protocol; ``fresh`` deletes the journal first.
    """
    from agent.jobs.yahpo import yahpo_root

    check_methods(methods)
    if tag is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", tag):
        raise TuneAgentError(f"--tag takes letters, digits, '-' and '_', got {tag!r}")
    scenario = Path(folder) if folder else yahpo_root() / "lcbench"
    mode = None if maximize is None else ("max" if maximize else "min")
    config = BenchConfig(
        scenario=str(scenario),
        target=target,
        mode=mode,
        fidelity=dict(fidelity or {}),
        seeds=seeds if seeds is not None else (QUICK_SEEDS if quick else 5),
        budget=budget,
        workers=workers,
        quick=quick,
        control=control,
        cache_dir=cache_dir,
        batch=batch,
        pending=pending if batch > 1 else "auto",
        ask_ahead=ask_ahead if batch > 1 else 0,
        report_at=tuple(k for k in (1, 3, 5, 10, 20, 30, 50, 100) if k <= budget),
        history_size=history_size,
        sources=sources,
        random_every=random_every,
    )
    job = load_yahpo_job(config.job_spec)  # refuses an unknown scenario, target or fidelity in one line
    if tasks is not None:
        config = BenchConfig(**{**config.__dict__, "tasks": tuple(job.scenario.instances[:tasks])})
    name = scenario.name + ("" if control == "none" else f"_{control}")
    result, sequential = _run_both(methods, config, out / "data" / "bench-runs" / f"{name}.jsonl", fresh, progress)
    variant, side = _variant(config), _side(config, tag)
    name += (f"_{variant}" if variant else "") + (f"_{side}" if side else "")
    metrics = out / "metrics" / f"{name}.json"
    write_report(result, metrics, out / "plots" / ("" if control == "none" else control) / variant / side)
    report = _report(result, config, tag)
    if sequential is not None:
        report["versus_sequential"] = versus_sequential(result, sequential)
    metrics.write_text(json.dumps(report, indent=2) + "\n")
    return report


def _run_both(
    methods: Sequence[str], config: BenchConfig, journal: Path, fresh: bool, progress: Callable[[str], None] | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The benchmark's runs, journalled in ``journal`` (one per scenario: the batch is in each run's
    key; ``fresh`` deletes it first), and with a batch the same runs one trial at a time (from the
    journal when already there)."""
    if fresh and journal.exists():
        journal.unlink()
    result = run_benchmark(methods, config, progress=progress, journal=journal)
    if config.batch <= 1:
        return result, None
    sequential = run_benchmark(
        methods, replace(config, batch=1, pending="auto", ask_ahead=0), progress=progress, journal=journal
    )
    return result, sequential


def _variant(config: BenchConfig) -> str:
    """The batch part of the report's name: ``batchN[_pending][_aheadK]``, empty for one trial at a time."""
    if config.batch == 1:
        return ""
    return (
        f"batch{config.batch}"
        + ("" if config.pending == "auto" else f"_{config.pending}")
        + (f"_ahead{config.ask_ahead}" if config.ask_ahead else "")
    )


def _side(config: BenchConfig, tag: str | None) -> str:
    """The side-run part of the report's name: ``[historyN][_sourcesK][_random_everyN][_tag]``."""
    parts = [
        f"history{config.history_size}" if config.history_size != 100 else "",
        f"sources{config.sources}" if config.sources is not None else "",
        f"random_every{config.random_every}" if config.random_every is not None else "",
        tag or "",
    ]
    return "_".join(filter(None, parts))


def _report(result: dict[str, Any], config: BenchConfig, tag: str | None) -> dict[str, Any]:
    """The report of a benchmark's runs: the summary, the settings, the engine and the protocol."""
    batch = config.batch
    pending = (
        ""
        if batch == 1
        else f" (pending points: {config.pending}"
        + (f", {config.ask_ahead} more asked ahead" if config.ask_ahead else "")
        + ")"
    )
    return {
        **summarise(result),
        "job": result["job"],
        "quick": config.quick,
        "control": config.control,
        "batch": batch,
        "history_size": config.history_size,
        "sources": config.sources,
        **({"random_every": config.random_every} if config.random_every is not None else {}),
        **({"tag": tag} if tag else {}),
        "engine": engine_fingerprint("bench/transfer.py"),
        "environment": environment(),
        **({"pending": config.pending, "ask_ahead": config.ask_ahead} if batch > 1 else {}),
        "protocol": PROTOCOL.format(
            history=config.history_size,
            budget=config.budget,
            batch=batch,
            pending=pending,
            reference=config.reference_size,
        ),
    }


def versus_sequential(batched: Mapping[str, Any], sequential: Mapping[str, Any]) -> dict[str, Any]:
    """Per method and reported trial count: mean regret one trial at a time, the batched minus the
    sequential mean with its 95% confidence interval (Student t over the paired (task, seed) runs),
    and the two-sided Wilcoxon signed-rank p-value over the same pairs."""
    from scipy.stats import t as student_t
    from scipy.stats import wilcoxon

    out: dict[str, Any] = {}
    for method, curves in batched["regret"].items():
        b, q = np.asarray(curves), np.asarray(sequential["regret"][method])
        rows = {}
        for k in batched["config"]["report_at"]:
            diff = b[:, k - 1] - q[:, k - 1]
            p = float(wilcoxon(diff).pvalue) if np.any(diff != 0) else 1.0
            mean, ci = float(diff.mean()), None  # one pair has no interval
            if len(diff) > 1:
                half = float(student_t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff)))
                ci = [round(mean - half, 4), round(mean + half, 4)]
            rows[f"@{k}"] = {
                "sequential": round(float(q[:, k - 1].mean()), 4),
                "batched_minus_sequential": round(mean, 4),
                "ci95": ci,
                "wilcoxon_p": float(f"{p:.3g}"),
            }
        out[method] = rows
    return out
