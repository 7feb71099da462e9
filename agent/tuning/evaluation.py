"""The DVC ``evaluate`` stage: leave-one-dataset-out warm-start evaluation, replayed by the product's
sampler over each held-out dataset's table (:mod:`agent.tuning.replay`)."""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from agent.errors import EmptyHistoryError
from agent.meta.export import load_export
from agent.meta.pipeline import (DISTANCES_FILE, EXPORT_DIR, history_space, fold_vectors, neighbour_precision_folds,
                                 normalisation_report)


def stage_evaluate(p: Mapping[str, Any], mf: Mapping[str, Any], metrics: Path, plots: Path,
                   export: Path = EXPORT_DIR, distances: Path = DISTANCES_FILE) -> dict[str, Any]:
    from agent.meta.evaluate import build_table, fold_ids, neighbour_precision, plan_runs, summarise, write_outputs
    from agent.tuning.replay import replay_dataset
    from agent.meta.handcrafted import handcrafted_metafeatures, metafeature_matrix

    datasets = load_export(export)
    if len(datasets) < 4:
        raise EmptyHistoryError(f"evaluation needs at least 4 historical datasets, the export has {len(datasets)}")
    D = np.array(json.loads(distances.read_text())["matrix"])
    space = history_space(datasets)
    table = build_table(datasets, space)
    folds = fold_ids(len(datasets), int(p.get("folds", 5)), int(mf.get("seed", 0)))
    k, acqs = int(p.get("k", 3)), list(p.get("acquisitions", ["ei", "ucb"]))
    hand = metafeature_matrix([handcrafted_metafeatures(h.sample[0], h.sample[1], h.summary) for h in datasets])
    default = mf.get("aggregator", "mean")
    wings = [default] + [w for w in p.get("wings", []) if w != default]
    learned = {w: fold_vectors(datasets, D, mf, w, folds) for w in wings}
    tasks = []
    for t in range(len(datasets)):
        vectors = {"learned": (learned[default][int(folds[t])], False), "handcrafted": (hand, True)}
        runs = plan_runs(t, vectors, table.E, table.U, k, int(p.get("seeds", 3)), acqs)
        for w in wings[1:]:
            from agent.meta.evaluate import neighbour_inits

            _, rows = neighbour_inits(learned[w][int(folds[t])], table.E, t, k, False)
            runs.append((f"learned:{w}/{acqs[0]}", rows, acqs[0], None))
        tasks.append({"target": t, "U": table.U, "E": table.E, "budget": int(p.get("budget", 20)), "runs": runs,
                      "space": space})
    with ProcessPoolExecutor(max_workers=int(p.get("workers", 2))) as pool:
        curves = list(pool.map(replay_dataset, tasks))
    sources = [h.source for h in datasets]
    report = {
        "datasets": len(datasets), "sources": len(set(sources)), "configs": len(table.keys),
        "neighbour_precision": neighbour_precision_folds(learned[default], folds, sources, k),
        "neighbour_precision_handcrafted": neighbour_precision(hand, sources, k, True),
        "methods": summarise(curves, acqs[0]), "leakage_control": f"{int(folds.max()) + 1}-fold retraining over datasets",
        "objective": "validation error (1 - val_acc)", "aggregator": default,
        "normalisation": normalisation_report(table.E, sources, k),
    }
    write_outputs(report, curves, metrics, plots, int(p.get("budget", 20)))
    return report
