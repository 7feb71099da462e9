"""The DVC ``evaluate`` stage: leave-one-source-out warm-start evaluation of every dataset of the
knowledge base, replayed by the product's own sampler over each held-out dataset's table
(:mod:`agent.pipeline.replay`).

Protocol:

* folds hold whole sources (:func:`agent.pipeline.evaluation_tables.source_folds`); the learned extractor that
  places a target is trained on the other folds only (target distances among their datasets), and
  the history a target sees is every dataset of *other* sources;
* every dataset is a target once; each method gives ``k`` initial table rows, then the product's
  BO steps (same GP, normal scores, interleaved random steps, acquisition) pick among the rest:
  ``cold`` (the product's Sobol design, ``seeds`` seeds), ``portfolio`` (the history's greedy
  portfolio), ``handcrafted`` and ``learned`` (the best configurations of the nearest neighbours,
  one per source first, as ``tune-agent start`` picks them; when the target is farther from the
  history than any historical dataset is from its nearest other-source neighbour the product seeds
  the portfolio instead, and so does the replay), ``learned+prior`` (plus the neighbours' surfaces
  as the GP's prior mean: what ``tune-agent start`` does by default once ``dvc repro`` has trained
  the extractor) and each extra wing (``learned:<aggregator>``);
* regret after each trial is normalised by the range of the target's table; the report gives
  regret@1/3/5/10, the paired Wilcoxon p-value against cold at each, and, for learned and
  hand-crafted meta-features, the Spearman rank correlation between meta-feature distance and
  target distance (paper 003 eq. 2) from each target to its history;
* the verdict decides ``--warm-start auto``: the learned extractor only where it is at least as good
  as hand-crafted meta-features at trials 1, 3 and 5 and in rank correlation
  (:func:`agent.pipeline.evaluation_tables.choose_meta_features`, written to ``models/warm_start.json``).

With ``holdout: dataset`` (paper 003's own setting: a new dataset's source has other subsamples in
the history) a target's history is every other dataset, its own source's included, and folds hold
datasets instead of sources.

The stage is resumable: each target's curves are appended to a journal under ``data/evaluate/``
(kept by DVC between runs, keyed by the settings and the exported history) as soon as they are
computed, and a rerun replays only what is missing. Progress goes to stderr, one line per target.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.errors import EmptyHistoryError
from agent.pipeline.evaluation_journal import cached, read_journal, settings_key
from agent.pipeline.export import load_export
from agent.pipeline.stages import DISTANCES_FILE, EXPORT_DIR, fold_vectors, history_space, normalisation_report

if TYPE_CHECKING:
    from agent.knowledge.history import HistoricalDataset
    from agent.pipeline.evaluation_tables import Table

EVALUATE_DIR = Path("data/evaluate")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def portfolio_rows(E: np.ndarray, history: Sequence[int], k: int) -> list[int]:
    """The history's greedy portfolio on the table: ``k`` rows minimising the mean best-so-far regret
    over the ``history`` datasets, by the product's rule (:func:`agent.surrogates.specs.greedy_portfolio`)."""
    from agent.pipeline.evaluation_tables import table_regrets
    from agent.surrogates.specs import greedy_portfolio

    return greedy_portfolio(table_regrets(E[list(history)]), k)


def _handcrafted_one(h: Any) -> np.ndarray:
    from agent.meta.neighbours import HandcraftedFeaturizer

    return HandcraftedFeaturizer().vector(h.sample[0], h.sample[1], h.kind, h.num_classes, h.summary)


def _handcrafted(datasets: list[Any], workers: int = 1) -> np.ndarray:
    """Hand-crafted meta-features of every dataset's sample, over ``workers`` processes."""
    if workers <= 1:
        return np.vstack([_handcrafted_one(h) for h in datasets])
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return np.vstack(list(pool.map(_handcrafted_one, datasets, chunksize=8)))


def _neighbour_plan(
    vectors: np.ndarray,
    t: int,
    history: list[int],
    sources: list[str],
    standardise: bool,
    E: np.ndarray,
    k: int,
    fallback: list[int],
) -> tuple[list[int], list[int], bool]:
    """(neighbour datasets, initial rows, far) for target ``t`` as the product's warm start picks them."""
    from agent.meta.neighbours import distinct_first, nearest
    from agent.pipeline.evaluation_tables import best_rows
    from agent.tuning.warmstart import nearness

    found = nearest(vectors[t], vectors[history], len(history), standardise)
    order = distinct_first([history[n.index] for n in found], sources)
    near = nearness(vectors[t], vectors[history], [sources[j] for j in history], standardise)
    if near is not None and near.far:
        return [], fallback, True
    neigh = order[:k]
    return neigh, best_rows(E, neigh, k), False


@dataclass
class _Setup:
    """What every part of the stage reads: the export, its table and the protocol's settings."""

    datasets: list[HistoricalDataset]
    D: np.ndarray  # target distances among the datasets
    space: Any
    table: Table
    sources: list[str]
    folds: np.ndarray
    k: int
    budget: int
    seeds: int
    acq: str
    default: str  # the aggregator of the learned extractor the product uses
    wings: list[str]  # the default aggregator first, then the extra ones
    key: str
    workers: int
    holdout: str = "source"  # what a target's history leaves out: its whole source, or only itself


HOLDOUTS = ("source", "dataset")


def stage_evaluate(
    p: Mapping[str, Any],
    mf: Mapping[str, Any],
    metrics: Path,
    plots: Path,
    export: Path = EXPORT_DIR,
    distances: Path = DISTANCES_FILE,
    journal: Path = EVALUATE_DIR,
    progress: Callable[[str], None] = _stderr,
    choice_dir: Path | None = None,
) -> dict[str, Any]:
    from agent.pipeline.evaluation_tables import choose_meta_features, paired, summarise, write_outputs

    start = time.perf_counter()
    s = _setup(p, mf, export, distances)
    journal.mkdir(parents=True, exist_ok=True)
    hand, learned = _meta_vectors(s, mf, journal, progress)
    tasks, facts = _target_tasks(s, hand, learned)
    done = _replay_missing(s, tasks, journal / "journal.jsonl", progress)
    per_target = _per_target_curves(tasks, done)
    report = _report(s, summarise(per_target, baseline="cold"), facts, start)
    report["learned_vs_handcrafted"] = paired(summarise(per_target, baseline="handcrafted"))
    report["auto_choice"] = choose_meta_features(report)
    mean_curves = {m: np.mean([c[m] for c in per_target], axis=0) for m in per_target[0]}
    write_outputs(report, mean_curves, metrics, plots)
    if choice_dir is not None:
        from agent.tuning.warm_choice import write_choice

        write_choice(choice_dir, report["auto_choice"], f"{s.datasets[0].job}/{s.space.signature()}")
    return report


def _setup(p: Mapping[str, Any], mf: Mapping[str, Any], export: Path, distances: Path) -> _Setup:
    """The export and its table, checked (at least 4 datasets from at least 2 sources), and the settings."""
    from agent.pipeline.evaluation_tables import build_table, source_folds

    datasets = load_export(export)
    if len(datasets) < 4:
        raise EmptyHistoryError(f"evaluation needs at least 4 historical datasets, the export has {len(datasets)}")
    D = np.array(json.loads(distances.read_text())["matrix"])
    space = history_space(datasets)
    table = build_table(datasets, space)
    sources = [h.source for h in datasets]
    if len(set(sources)) < 2:
        raise EmptyHistoryError("a leave-one-source-out evaluation needs datasets from at least 2 sources")
    default = str(mf.get("aggregator", "mean"))
    holdout = str(p.get("holdout", "source"))
    if holdout not in HOLDOUTS:
        raise EmptyHistoryError(f"evaluate.holdout must be one of {', '.join(HOLDOUTS)}, got {holdout!r}")
    units = sources if holdout == "source" else [h.name for h in datasets]
    return _Setup(
        datasets=datasets,
        D=D,
        space=space,
        table=table,
        sources=sources,
        folds=source_folds(units, int(p.get("folds", 5)), int(mf.get("seed", 0))),
        k=int(p.get("k", 3)),
        budget=int(p.get("budget", 10)),
        seeds=int(p.get("seeds", 1)),
        acq=str(p.get("acquisition", "ei")),
        default=default,
        wings=[default] + [w for w in p.get("wings", []) if w != default],
        key=settings_key(p, mf, [h.key for h in datasets], table.keys),
        workers=max(1, int(p.get("workers", 2))),
        holdout=holdout,
    )


def _learned_arrays(s: _Setup, mf: Mapping[str, Any], wing: str) -> dict[str, np.ndarray]:
    """The ``wing`` extractor's vectors of every dataset, one array per fold it was trained without."""
    return {str(f): v for f, v in fold_vectors(s.datasets, s.D, mf, wing, s.folds).items()}


def _meta_vectors(
    s: _Setup, mf: Mapping[str, Any], journal: Path, progress: Callable[[str], None]
) -> tuple[np.ndarray, dict[str, dict[int, np.ndarray]]]:
    """Hand-crafted meta-features of every dataset, and per wing and fold the learned extractor's
    vectors, each cached in ``journal``."""
    from agent.meta.handcrafted import HANDCRAFTED_VERSION

    hand = cached(
        journal / f"handcrafted-v{HANDCRAFTED_VERSION}-{s.key}.npz", lambda: {"v": _handcrafted(s.datasets, s.workers)}
    )["v"]
    learned: dict[str, dict[int, np.ndarray]] = {}
    for w in s.wings:
        progress(f"evaluate: training the {w} extractor on {int(s.folds.max()) + 1} source folds")
        arrays = cached(journal / f"learned-{w}-{s.key}.npz", partial(_learned_arrays, s, mf, w))
        learned[w] = {int(f): v for f, v in arrays.items()}
    return hand, learned


def _target_tasks(
    s: _Setup, hand: np.ndarray, learned: Mapping[str, Mapping[int, np.ndarray]]
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Per target, the replay task (its methods' initial rows) and its facts (far from the history
    or not, the rank correlation of each meta-feature kind)."""
    from agent.meta.neighbours import pairwise_distances
    from agent.pipeline.evaluation_tables import rank_correlation

    hand_d = pairwise_distances(hand, True)
    learned_d = {f: pairwise_distances(v, False) for f, v in learned[s.default].items()}
    tasks, facts = [], {}
    for t, h in enumerate(s.datasets):
        history = [
            j for j in range(len(s.datasets)) if (s.sources[j] != s.sources[t] if s.holdout == "source" else j != t)
        ]
        runs, far = _target_runs(s, t, history, hand, learned)
        facts[h.name] = {
            "far": far,
            "rank_correlation": {
                "handcrafted": rank_correlation(hand_d, s.D, t, history),
                "learned": rank_correlation(learned_d[int(s.folds[t])], s.D, t, history),
            },
        }
        tasks.append(
            {
                "target": t,
                "name": h.name,
                "U": s.table.U,
                "E": s.table.E,
                "budget": s.budget,
                "runs": runs,
                "space": s.space,
            }
        )
    return tasks, facts


def _target_runs(
    s: _Setup, t: int, history: list[int], hand: np.ndarray, learned: Mapping[str, Mapping[int, np.ndarray]]
) -> tuple[list[tuple[str, list[int], str, list[int] | None]], dict[str, bool]]:
    """Target ``t``'s runs (method, initial rows, acquisition, prior neighbours) and whether it is far
    from its history for the hand-crafted and the learned meta-features."""
    from agent.pipeline.evaluation_tables import design_inits

    E, k, acq, fold = s.table.E, s.k, s.acq, int(s.folds[t])
    fallback = portfolio_rows(E, history, k)
    _, h_rows, h_far = _neighbour_plan(hand, t, history, s.sources, True, E, k, fallback)
    ln, l_rows, l_far = _neighbour_plan(learned[s.default][fold], t, history, s.sources, False, E, k, fallback)
    runs: list[tuple[str, list[int], str, list[int] | None]] = [
        (f"cold#{seed}", design_inits("sobol", k, s.table.U, seed=1000 * t + seed), acq, None)
        for seed in range(s.seeds)
    ]
    runs += [
        ("portfolio", fallback, acq, None),
        ("handcrafted", h_rows, acq, None),
        ("learned", l_rows, acq, None),
        ("learned+prior", l_rows, acq, ln or None),
    ]
    for w in s.wings[1:]:
        _, rows, _ = _neighbour_plan(learned[w][fold], t, history, s.sources, False, E, k, fallback)
        runs.append((f"learned:{w}", rows, acq, None))
    return runs, {"handcrafted": h_far, "learned": l_far}


def _replay_missing(
    s: _Setup, tasks: list[dict[str, Any]], journal_file: Path, progress: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """Every target's journal entry: those of ``journal_file`` under this key, and the missing ones
    replayed over ``s.workers`` processes, each appended as soon as it is done."""
    from agent.pipeline.replay import replay_dataset

    done = read_journal(journal_file, s.key)
    todo = [task for task in tasks if task["name"] not in done]
    if done:
        progress(f"evaluate: {len(done)} of {len(tasks)} targets already in {journal_file}; replaying {len(todo)}")
    replay_start = time.perf_counter()
    with open(journal_file, "a") as out, ProcessPoolExecutor(max_workers=s.workers) as pool:
        pending = {pool.submit(replay_dataset, task): task["name"] for task in todo}
        finished = 0
        while pending:
            ready, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in ready:
                name = pending.pop(fut)
                entry = {"key": s.key, "target": name, "curves": fut.result()}
                out.write(json.dumps(entry) + "\n")
                out.flush()
                done[name] = entry
                finished += 1
                elapsed = time.perf_counter() - replay_start
                eta = elapsed / finished * (len(todo) - finished)
                progress(
                    f"evaluate: [{len(done)}/{len(tasks)}] {name} ({elapsed / 60:.1f} min, about "
                    f"{eta / 60:.1f} min left)"
                )
    return done


def _per_target_curves(tasks: list[dict[str, Any]], done: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per target, each method's regret curve (the cold seeds averaged into one ``cold``)."""
    per_target: list[dict[str, Any]] = []
    for task in tasks:
        curves = done[task["name"]]["curves"]
        merged: dict[str, list[np.ndarray]] = {}
        for name, c in curves.items():
            merged.setdefault(name.split("#")[0], []).append(np.asarray(c, dtype=float))
        per_target.append({m: np.mean(v, axis=0) for m, v in merged.items()})
    return per_target


def _report(s: _Setup, methods: dict[str, Any], facts: Mapping[str, Mapping[str, Any]], start: float) -> dict[str, Any]:
    """The stage's report (without its ``auto_choice``): the protocol in words, the methods' regret
    and the meta-features' rank correlation."""
    from agent.pipeline.evaluation_tables import rank_summary

    n, n_sources, n_folds = len(s.datasets), len(set(s.sources)), int(s.folds.max()) + 1
    return {
        "protocol": (
            f"leave-one-{s.holdout}-out replay of every dataset ({n} datasets, {n_sources} "
            f"sources, {n_folds} {s.holdout} folds): the product's sampler restricted to the target's "
            f"{len(s.table.keys)}-configuration table, {s.k} initial configurations then BO ({s.acq}) to {s.budget} "
            "trials; the history of a target is "
            + (
                "every dataset of other sources"
                if s.holdout == "source"
                else "every other dataset, its source's included"
            )
            + "; the learned extractor is retrained without the target's fold; regret normalised over the "
            f"target's table; paired Wilcoxon signed-rank test against cold over the {n} targets"
        ),
        "datasets": n,
        "sources": n_sources,
        "configs": len(s.table.keys),
        "folds": n_folds,
        "k": s.k,
        "budget": s.budget,
        "cold_seeds": s.seeds,
        "aggregator": s.default,
        "objective": "validation error (1 - val_acc)",
        "methods": methods,
        "rank_correlation": rank_summary(facts, s.holdout),
        "far_targets": {m: int(sum(f["far"][m] for f in facts.values())) for m in ("handcrafted", "learned")},
        "normalisation": normalisation_report(s.table.E, s.sources, s.k),
        "seconds": round(time.perf_counter() - start, 1),
    }
