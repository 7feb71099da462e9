"""HTS on real job pairs (paper 001's claim): how many fewer target evaluations?

Paper 001 reports that HTS reaches the result of BO without transfer with about five times fewer
evaluations. This benchmark tests that on real Lightning training, with the product's own samplers:

- a pair is (source dataset, target dataset) of one job; the source's history is its bootstrap
  study from the store (one shared Sobol set of configurations, as ``tune-agent bootstrap`` logs it),
  written alone into an in-memory knowledge base, so HTS can only transfer from that source;
- per seed, two real ``tune-agent start`` studies on the target (same code path:
  :func:`agent.tuning.service.prepare_study` and the runner): ``cold`` (``--warm-start none
  --surrogate gp``, plain BO) and ``hts`` (``--sampler hts --source <the source study>``);
- the evaluation ratio of a pair: on the mean best-so-far curves over seeds, ``c`` = cold's value at
  the last trial; ``t_cold`` = the first trial at which cold's curve reaches ``c``; ``t_hts`` = the
  first at which HTS's curve reaches ``c``; ratio = ``t_cold / t_hts`` (above 1: HTS needs fewer
  evaluations; ``None`` when HTS never reaches ``c`` within the budget). Per seed the same is
  counted (``reached``: seeds in which HTS reached that seed's cold result, and their ratios);
- regret is also reported, normalised over the target's bootstrap table joined with every value
  found (as :mod:`agent.bench.warmstart_e2e`).

Runs are journalled (one JSON line per pair, seed and method) so an interrupted benchmark resumes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from agent.bench.fingerprint import read_journal, run_key
from agent.errors import TuneAgentError

# digits -> mnist-5k and mnist-5k -> mnist1d (image pairs of related sources); two tabular pairs of the
# knowledge base whose tables share their structure (the same crop trial on two Caribbean islands;
# Gapminder as dslabs filters it and the unfiltered original).
PAIRS: tuple[tuple[str, str], ...] = (
    ("digits", "mnist-5k"),
    ("mnist-5k", "mnist1d"),
    ("r:DAAG/stVincent#label=site&rows=1000", "r:DAAG/antigua#label=site&rows=1000"),
    ("r:dslabs/gapminder#label=continent&rows=1000", "r:gapminder/gapminder_unfiltered#label=continent&rows=1000"),
)
METHODS: dict[str, dict[str, Any]] = {
    "cold": {"warm_start": "none", "surrogate": "gp", "sampler": "bo"},
    "hts": {"warm_start": "none", "sampler": "hts"},
    "hts-anchored": {"warm_start": "none", "sampler": "hts-anchored"},  # ours: agent.surrogates.hts
}
MAPPED = ("hts", "hts-anchored")


@dataclass(frozen=True)
class HtsPairsConfig:
    job: str = "mlp"
    pairs: tuple[tuple[str, str], ...] = PAIRS
    seeds: int = 3
    trials: int = 20
    epochs: int = 2
    workers: int = 2
    n_init: int | None = None  # m of Algorithm 1 (and cold BO's initial design); None: the product's default


def find_entries(entries: Sequence[dict[str, Any]], pairs: Sequence[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """The bootstrap entry of every dataset named in ``pairs`` (by dataset spec); one line for a missing one."""
    by_dataset = {str(e["settings"].get("dataset")): e for e in entries}
    missing = sorted({d for pair in pairs for d in pair if d not in by_dataset})
    if missing:
        raise TuneAgentError(
            f"no bootstrap study of {', '.join(missing)} in the store: run `tune-agent bootstrap "
            "--starter` (or bootstrap those datasets) first"
        )
    return {d: by_dataset[d] for pair in pairs for d in pair}


_WORKER: dict[str, Any] = {}


def _init(space: list[dict[str, Any]]) -> None:
    import torch

    from agent.execution.runner import quiet_lightning

    torch.set_num_threads(1)
    quiet_lightning()
    _WORKER["space"] = space


def _run(
    source: dict[str, Any], target: dict[str, Any], seed: int, methods: Sequence[str], config: HtsPairsConfig
) -> dict[str, Any]:
    from agent.config import StudyRequest
    from agent.execution.progress import SilentReporter
    from agent.execution.runner import run_study
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.starter import write_entries
    from agent.tuning.service import prepare_study

    out: dict[str, Any] = {}
    for method in methods:
        kb = open_knowledge_base("memory:")  # the source alone: HTS has nothing else to transfer from
        write_entries(kb, [source], _WORKER["space"], "the HTS benchmark's history")
        options = dict(METHODS[method])
        if method in MAPPED:
            options["source"] = source["name"]
        req = StudyRequest(
            dataset=target["settings"]["dataset"],
            job=config.job,
            trials=config.trials,
            epochs=config.epochs,
            seed=seed,
            study_name=f"hts-pairs-{method}-{seed}",
            n_init=config.n_init,
            **options,
        )
        start = time.perf_counter()
        study, job, data, split = prepare_study(req, echo=lambda _: None, kb=kb)
        run_study(study, job, data, split, SilentReporter(), trace_plot=False)
        trials = sorted(study.trials(), key=lambda t: t.number)
        out[method] = {
            "values": [t.value if t.value is not None else float("nan") for t in trials],
            "origins": [t.origin for t in trials],
            "seconds": round(time.perf_counter() - start, 1),
        }
    return {
        "pair": pair_key(source["settings"]["dataset"], target["settings"]["dataset"]),
        "seed": seed,
        "methods": out,
    }


def _run_job(args: tuple) -> dict[str, Any]:
    return _run(*args)


def pair_key(source: str, target: str) -> str:
    return f"{source} -> {target}"


def first_reaching(curve: np.ndarray, level: float) -> int | None:
    """The 1-based trial at which a best-so-far ``curve`` (minimised) first reaches ``level``, or None."""
    hit = np.nonzero(curve <= level + 1e-12)[0]
    return int(hit[0]) + 1 if len(hit) else None


def evaluation_ratio(cold: np.ndarray, hts: np.ndarray) -> dict[str, Any]:
    """Paper 001's figure on two best-so-far curves (minimised, same length): how many evaluations
    HTS needs to reach cold's final value, against how many cold needed."""
    level = float(cold[-1])
    t_cold, t_hts = first_reaching(cold, level), first_reaching(hts, level)
    return {
        "cold_final": round(level, 5),
        "hts_final": round(float(hts[-1]), 5),
        "cold_trials": t_cold,
        "hts_trials": t_hts,
        "ratio": None if t_hts is None or t_cold is None else round(t_cold / t_hts, 2),
    }


def best_so_far(values: Sequence[float]) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    worst = np.nanmax(v) if np.isfinite(v).any() else 0.0
    return np.minimum.accumulate(np.where(np.isfinite(v), v, worst))


def summarise(config: HtsPairsConfig, entries: dict[str, dict[str, Any]], done: dict, seconds: float) -> dict[str, Any]:
    pairs: dict[str, Any] = {}
    for source, target in config.pairs:
        key = pair_key(source, target)
        runs = {m: [best_so_far(done[(key, s, m)]["values"]) for s in range(config.seeds)] for m in METHODS}
        mean = {m: np.mean(r, axis=0) for m, r in runs.items()}
        per_seed = [evaluation_ratio(c, h) for c, h in zip(runs["cold"], runs["hts"])]
        anchored = [evaluation_ratio(c, h) for c, h in zip(runs["cold"], runs["hts-anchored"])]
        table = [v for v in entries[target]["values"] if v is not None and np.isfinite(v)]
        found = [float(x) for r in runs.values() for c in r for x in c]
        low, high = min(table + found), max(table + found)
        regret = {m: ((mean[m] - low) / max(high - low, 1e-12)).round(4) for m in METHODS}
        checkpoints = [k for k in (1, 3, 5, 10, 20, 30, 50) if k <= config.trials]
        pairs[key] = {
            "source_study": entries[source]["name"],
            **evaluation_ratio(mean["cold"], mean["hts"]),
            "seeds_reached": sum(r["hts_trials"] is not None for r in per_seed),
            "per_seed": per_seed,
            "anchored": {
                **{k: v for k, v in evaluation_ratio(mean["cold"], mean["hts-anchored"]).items() if k != "cold_final"},
                "seeds_reached": sum(r["hts_trials"] is not None for r in anchored),
            },
            "regret": {m: {f"@{k}": float(regret[m][k - 1]) for k in checkpoints} for m in METHODS},
            "mean_curves": {m: mean[m].round(5).tolist() for m in METHODS},
            "seconds": {
                m: round(float(np.mean([done[(key, s, m)]["seconds"] for s in range(config.seeds)])), 1)
                for m in METHODS
            },
        }
    ratios = [p["ratio"] for p in pairs.values()]
    anchored_ratios = [p["anchored"]["ratio"] for p in pairs.values()]
    return {
        "protocol": (
            f"real tune-agent studies of job {config.job} ({config.epochs} epochs, {config.trials} trials, "
            f"{config.seeds} seeds, initial design {config.n_init or 'default'}) on each target: cold = "
            "--warm-start none --surrogate gp; hts = --sampler hts "
            "--source <the source's bootstrap study>, the source alone in the history; hts-anchored = the same with "
            "--sampler hts-anchored (ours; its figures under 'anchored'); ratio = trials cold "
            "needs to reach its final mean best / trials hts needs to reach it (mean best-so-far over seeds; "
            "null: not reached within the budget); paper 001 claims about 5"
        ),
        "job": config.job,
        "seeds": config.seeds,
        "trials": config.trials,
        "epochs": config.epochs,
        "pairs": pairs,
        "pairs_reached": sum(r is not None for r in ratios),
        "pairs_at_least_5x": sum(r is not None and r >= 5 for r in ratios),
        "anchored_pairs_reached": sum(r is not None for r in anchored_ratios),
        "wall_seconds": round(seconds, 1),
    }


def run_hts_pairs(
    kb: Any, config: HtsPairsConfig, journal: Path, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    """Runs (or resumes from ``journal``) every (pair, seed) and returns the report."""
    from agent.jobs import load_job
    from agent.knowledge.starter import read_studies

    start = time.perf_counter()
    entries = find_entries(read_studies(kb, config.job), config.pairs)
    space = load_job(config.job).space.to_dict()
    # a run is reused only under the same settings and engine code
    key = run_key(
        "bench/hts_pairs.py", {k: v for k, v in asdict(config).items() if k not in ("workers", "seeds", "pairs")}
    )
    done = read_journal(journal, key, "pair")
    jobs = []
    for source, target in config.pairs:
        for seed in range(config.seeds):
            missing = tuple(m for m in METHODS if (pair_key(source, target), seed, m) not in done)
            if missing:
                jobs.append((entries[source], entries[target], seed, missing, config))
    progress(
        f"{len(config.pairs)} pairs x {config.seeds} seeds x {len(METHODS)} methods, {config.trials} trials each; "
        f"{len(config.pairs) * config.seeds - len(jobs)} (pair, seed) already in {journal}"
    )
    journal.parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(
        config.workers, mp_context=get_context("spawn"), initializer=_init, initargs=(space,)
    ) as pool:
        futures = [pool.submit(_run_job, j) for j in jobs]
        for i, future in enumerate(as_completed(futures), 1):
            res = future.result()
            with journal.open("a") as fh:
                for method, result in res["methods"].items():
                    done[(res["pair"], res["seed"], method)] = result
                    fh.write(
                        json.dumps(
                            {"key": key, "pair": res["pair"], "seed": res["seed"], "method": method, "result": result}
                        )
                        + "\n"
                    )
            progress(
                f"[{i}/{len(jobs)}] {res['pair']} seed {res['seed']}: "
                + ", ".join(f"{m} {np.nanmin(v['values']):.4f}" for m, v in res["methods"].items())
                + f" ({(time.perf_counter() - start) / 60:.1f} min)"
            )
    return summarise(config, entries, done, time.perf_counter() - start)
