"""`tune-agent-bench metafeature-data`: do learned meta-features get better with more training tasks?

Paper 003's extractor (:mod:`agent.meta.extractor_train`), trained on the starter history alone,
places datasets worse than the hand-crafted meta-features in the `evaluate` replay
(docs/benchmarks/warm-start.md, "Replay of every dataset"). This asks whether that is a matter
of data rather than of architecture: the same replay of the learned neighbours, with the
extractor of each source fold trained

- ``history``: on the history alone, as the `evaluate` stage trains it (``meta_features.steps``);
- ``history, steps x F``: on the history alone for ``F`` times the steps (the compute control);
- ``history + extra, steps x F``: on the history and the EXTRA datasets (another export, e.g. the
  R tables the per-package cap left out, run through ``tune-agent bootstrap`` on the same shared
  configurations) for ``F`` times the steps.

Extra datasets only ever enter the extractor's training pairs: they are never targets, never
neighbours, and an extra dataset is in the fold of its source (a source new to the history gets a
fold of its own choosing, dealt round-robin), so a target's extractor has seen no dataset of the
target's source. The hand-crafted neighbours run in the same replay as the reference. Each
(arm, fold) extractor is cached under OUT so an interrupted run resumes; every fold's training and
the replay print their progress with an ETA.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

REPORT_AT = (1, 3, 5, 10)
PROTOCOL = (
    "the `evaluate` stage's leave-one-source-out replay of every history dataset (its sampler on the "
    "target's {configs}-configuration table, {k} neighbours' best configurations then BO "
    "({acq}) to {budget} trials) for the learned neighbours of three extractors per source fold, and "
    "the hand-crafted neighbours as the reference; extra datasets enter only the extractors' training "
    "pairs, in the fold of their source; regret normalised over the target's table; p: paired "
    "Wilcoxon signed-rank against the hand-crafted neighbours"
)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def extra_folds(main_sources: list[str], main_folds: np.ndarray, extra_sources: list[str]) -> np.ndarray:
    """The fold of each extra dataset: its source's fold in the history, else dealt round-robin
    (sorted sources) over the folds."""
    of = {s: int(f) for s, f in zip(main_sources, main_folds)}
    n = int(main_folds.max()) + 1
    new = sorted({s for s in extra_sources if s not in of})
    of.update({s: i % n for i, s in enumerate(new)})
    return np.array([of[s] for s in extra_sources], dtype=int)


def _progress_logger(label: str, steps: int, say: Callable[[str], None]) -> Any:
    """A Lightning logger that says a fold's training step, loss and ETA (at most every 5 s)."""
    from lightning.pytorch.loggers import Logger

    class Said(Logger):
        def __init__(self) -> None:
            super().__init__()
            self.start, self.said = time.perf_counter(), 0.0

        @property
        def name(self) -> str:
            return "said"

        @property
        def version(self) -> int:
            return 0

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

        def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
            now = time.perf_counter()
            if step is None or now - self.said < 5.0:
                return
            self.said = now
            done = max(1, int(step) + 1)
            eta = (now - self.start) / done * (steps - done)
            loss = metrics.get("train_loss")
            said_loss = f", loss {loss:.3f}" if loss is not None else ""
            say(f"{label}: step {done}/{steps}{said_loss}, about {eta:.0f} s left")

    return Said()


def _train_fold(
    samples: list[Any],
    D: np.ndarray,
    train: np.ndarray,
    embed: list[Any],
    mf: Mapping[str, Any],
    steps: int,
    label: str,
    say: Callable[[str], None],
) -> np.ndarray:
    from agent.meta.extractor_train import train_extractor
    from agent.pipeline.stages import _extractor_config

    config = _extractor_config({**mf, "steps": steps})
    extractor, _ = train_extractor(
        [samples[i] for i in train],
        D[np.ix_(train, train)],
        config,
        logger=_progress_logger(label, steps, say),
        threads=2,
    )
    return extractor.embed_many(embed)


def run_metafeature_data(
    export: Path,
    extra: Path,
    params: Mapping[str, Any],
    out: Path,
    factor: int = 4,
    say: Callable[[str], None] = _stderr,
) -> dict[str, Any]:
    """Runs the three arms (see the module doc); writes ``out/metrics/metafeature_data.json``."""
    from agent.pipeline.evaluation_tables import build_table, source_folds, summarise
    from agent.pipeline.stages import _samples, history_space

    start = time.perf_counter()
    ev, mf = dict(params.get("evaluate", {})), dict(params.get("meta_features", {}))
    main, more = _histories(export, extra)
    every = main + more
    n = len(main)
    space = history_space(every)
    table = build_table(every, space)
    D = _target_distances(table.E, str(params.get("distances", {}).get("normalisation", "rank")))
    sources = [h.source for h in main]
    seed = int(mf.get("seed", 0))
    folds = source_folds(sources, int(ev.get("folds", 5)), seed)
    all_folds = np.concatenate([folds, extra_folds(sources, folds, [h.source for h in more])])
    k, budget, acq = int(ev.get("k", 3)), int(ev.get("budget", 10)), str(ev.get("acquisition", "ei"))
    steps = int(mf.get("steps", 300))
    say(
        f"metafeature-data: {n} history datasets ({len(set(sources))} sources), {len(more)} extra "
        f"({len(set(h.source for h in more))} sources), {len(table.keys)} shared configurations, "
        f"{int(folds.max()) + 1} folds"
    )
    cache = out / "data" / "metafeature-data"
    cache.mkdir(parents=True, exist_ok=True)
    arms = [
        ("history", steps, False),
        (f"history, steps x{factor}", steps * factor, False),
        (f"history + extra, steps x{factor}", steps * factor, True),
    ]
    vectors, timings = _train_arms(arms, _samples(every), n, folds, all_folds, D, mf, cache, say)
    tasks, corr = _replay_tasks(main, table, space, D, folds, vectors, k, budget, acq)
    curves = _replay(tasks, say)
    per_target = [{m: np.asarray(c, dtype=float) for m, c in curves[task["name"]].items()} for task in tasks]
    report = {
        "protocol": PROTOCOL.format(configs=len(table.keys), k=k, acq=acq, budget=budget),
        "history": {"datasets": n, "sources": len(set(sources))},
        "extra": {"datasets": len(more), "sources": sorted({h.source for h in more})},
        "steps": steps,
        "factor": factor,
        "methods": summarise(per_target, baseline="handcrafted"),
        "rank_correlation": {m: round(float(np.nanmean(v)), 4) for m, v in corr.items()},
        "training_seconds": timings,
        "seconds": round(time.perf_counter() - start, 1),
    }
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    (out / "metrics" / "metafeature_data.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def _histories(export: Path, extra: Path) -> tuple[list[Any], list[Any]]:
    """The history and the extra datasets not already in it; refused when either is too small."""
    from agent.errors import TuneAgentError
    from agent.pipeline.export import load_export

    main, more = load_export(export), load_export(extra)
    names = {h.name for h in main}
    more = [h for h in more if h.name not in names]
    if len(main) < 4 or not more:
        raise TuneAgentError(
            f"need a history of at least 4 datasets and extra datasets beside it (got {len(main)} and {len(more)})"
        )
    return main, more


def _target_distances(E: np.ndarray, how: str) -> np.ndarray:
    """The datasets' target distances, the missing ones set to the largest present (1 when none is)."""
    from agent.pipeline.distances import target_distance_matrix

    D = target_distance_matrix(E, how=how)
    return np.where(np.isfinite(D), D, np.nanmax(D[np.isfinite(D)]) if np.isfinite(D).any() else 1.0)


def _train_arms(
    arms: list[tuple[str, int, bool]],
    samples: list[Any],
    n: int,
    folds: np.ndarray,
    all_folds: np.ndarray,
    D: np.ndarray,
    mf: Mapping[str, Any],
    cache: Path,
    say: Callable[[str], None],
) -> tuple[dict[str, dict[int, np.ndarray]], dict[str, float]]:
    """Each arm's (label, steps, with the extra datasets) embedding of the ``n`` history datasets per
    source fold, and the seconds each arm took."""
    vectors: dict[str, dict[int, np.ndarray]] = {}
    timings: dict[str, float] = {}
    for label, arm_steps, with_extra in arms:
        arm_start = time.perf_counter()
        pool = np.arange(len(samples)) if with_extra else np.arange(n)
        train_of = {int(f): pool[all_folds[pool] != f] for f in np.unique(folds)}
        key = f"{'extra' if with_extra else 'history'}-{arm_steps}-fold{{}}-n{n}-m{len(samples) - n}"
        vectors[label] = _arm_vectors(label, train_of, key, cache, samples, D, n, mf, arm_steps, say)
        timings[label] = round(time.perf_counter() - arm_start, 1)
    return vectors, timings


def _arm_vectors(
    label: str,
    train_of: Mapping[int, np.ndarray],
    key: str,
    cache: Path,
    samples: list[Any],
    D: np.ndarray,
    n: int,
    mf: Mapping[str, Any],
    steps: int,
    say: Callable[[str], None],
) -> dict[int, np.ndarray]:
    """One arm's embedding of the history per fold, by the extractor trained on ``train_of[fold]``;
    each fold's vectors are cached as ``cache/<key with the fold>.npy`` and read when there."""
    out: dict[int, np.ndarray] = {}
    for f, train in train_of.items():
        path = cache / f"{key.format(f)}.npy"
        if path.exists():
            out[f] = np.load(path)
            continue
        say(f"{label}, fold {f}: training on {len(train)} datasets, {steps} steps")
        v = _train_fold(samples, D, train, samples[:n], mf, steps, f"{label}, fold {f}", say)
        np.save(path, v)
        out[f] = v
    return out


def _replay_tasks(
    main: list[Any],
    table: Any,
    space: Any,
    D: np.ndarray,
    folds: np.ndarray,
    vectors: Mapping[str, Mapping[int, np.ndarray]],
    k: int,
    budget: int,
    acq: str,
) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """The replay of every history dataset (hand-crafted neighbours and each arm's learned ones) and
    each method's rank correlation of meta-feature and target distances per target."""
    from agent.meta.neighbours import pairwise_distances
    from agent.pipeline.evaluation import _handcrafted, _neighbour_plan, portfolio_rows
    from agent.pipeline.evaluation_tables import rank_correlation

    n = len(main)
    sources = [h.source for h in main]
    hand = _handcrafted(main, 2)
    hand_d = pairwise_distances(hand, True)
    learned_d = {
        label: {f: pairwise_distances(v, False) for f, v in folds_of.items()}  # once per fold, not per target
        for label, folds_of in vectors.items()
    }
    Dm, Em = D[:n, :n], table.E[:n]
    tasks: list[dict[str, Any]] = []
    corr: dict[str, list[float]] = {"handcrafted": [], **{label: [] for label in vectors}}
    for t, h in enumerate(main):
        history = [j for j in range(n) if sources[j] != sources[t]]
        fallback = portfolio_rows(Em, history, k)
        _, h_rows, _ = _neighbour_plan(hand, t, history, sources, True, Em, k, fallback)
        runs = [("handcrafted", h_rows, acq, None)]
        corr["handcrafted"].append(rank_correlation(hand_d, Dm, t, history))
        for label, view_of in vectors.items():
            _, rows, _ = _neighbour_plan(view_of[int(folds[t])], t, history, sources, False, Em, k, fallback)
            runs.append((label, rows, acq, None))
            corr[label].append(rank_correlation(learned_d[label][int(folds[t])], Dm, t, history))
        tasks.append(
            {"target": t, "name": h.name, "U": table.U, "E": Em, "budget": budget, "runs": runs, "space": space}
        )
    return tasks, corr


def _replay(tasks: list[dict[str, Any]], say: Callable[[str], None]) -> dict[str, dict[str, list[float]]]:
    """Every task's regret curves per method, replayed two at a time with progress and an ETA."""
    from agent.pipeline.replay import replay_dataset

    curves: dict[str, dict[str, list[float]]] = {}
    replay_start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as executor:
        pending = {executor.submit(replay_dataset, task): task["name"] for task in tasks}
        while pending:
            ready, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in ready:
                curves[pending.pop(fut)] = fut.result()
            if len(curves) % 25 == 0 or not pending:
                elapsed = time.perf_counter() - replay_start
                say(
                    f"metafeature-data: replayed {len(curves)}/{len(tasks)} targets, about "
                    f"{elapsed / len(curves) * len(pending):.0f} s left"
                )
    return curves


__all__ = ("extra_folds", "run_metafeature_data")
