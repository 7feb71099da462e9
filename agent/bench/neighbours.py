"""Warm-start latency: meta-features of a new dataset plus the neighbour search over N datasets.

The N historical meta-feature vectors are drawn at random (their values do not change the cost of
a Euclidean search); the new dataset is real and goes through the real featurisers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np


def measure_neighbour_search(
    dataset: str, n_history: int, models_dir: Path, k: int = 3, seed: int = 0
) -> dict[str, Any]:
    from agent.data import describe_dataset, load_dataset, sample_dataset
    from agent.meta.neighbours import HandcraftedFeaturizer, LearnedFeaturizer, nearest
    from agent.meta.siamese import ExtractorConfig, MetaFeatureExtractor, MetaFeatureNet

    ds = load_dataset(dataset)
    X, y = sample_dataset(ds, 256, seed=seed)
    summary = describe_dataset(ds)
    learned = LearnedFeaturizer.load(models_dir)
    trained = learned is not None
    if learned is None:  # same architecture, untrained weights: the cost is the same
        config = ExtractorConfig()
        learned = LearnedFeaturizer(MetaFeatureExtractor(MetaFeatureNet(config), config, 1.0))
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"dataset": dataset, "n_history": n_history, "trained_extractor": trained}
    for featurizer in (learned, HandcraftedFeaturizer()):
        featurizer.vector(X, y, ds.kind, ds.num_classes, summary)  # warm-up (lazy imports)
        start = time.perf_counter()
        query = featurizer.vector(X, y, ds.kind, ds.num_classes, summary)
        mid = time.perf_counter()
        history = rng.normal(size=(n_history, len(query)))
        found = nearest(query, history, k, featurizer.standardise)
        end = time.perf_counter()
        out[featurizer.method] = {
            "metafeatures_s": round(mid - start, 4),
            "search_s": round(end - mid, 4),
            "total_s": round(end - start, 4),
            "found": len(found),
        }
    return out


def measure_warm_start(
    kb: Any, dataset: str, job_name: str, models_dir: Path, method: str = "auto", k: int = 3, repeats: int = 3
) -> dict[str, Any]:
    """The product's own warm start on a real store: load the new table, summarise and sample it,
    then :func:`agent.tuning.warmstart.plan_warm_start` (meta-features and the neighbour search over
    the store's history). Median seconds over ``repeats`` (the first, which pays imports, is kept apart)."""
    from agent.data import describe_dataset, load_dataset, sample_dataset
    from agent.jobs import load_job
    from agent.tuning.service import SAMPLE_SIZE
    from agent.tuning.warmstart import plan_warm_start

    job = load_job(job_name)
    timings, first, warm = [], None, None
    for i in range(repeats + 1):
        start = time.perf_counter()
        ds = load_dataset(dataset)
        loaded = time.perf_counter()
        sample = sample_dataset(ds, SAMPLE_SIZE, seed=0)
        warm = plan_warm_start(kb, job, ds, sample, describe_dataset(ds), method, k, models_dir)
        end = time.perf_counter()
        row = {"load_s": loaded - start, "warm_start_s": end - loaded, "total_s": end - start}
        if i == 0:
            first = row
        else:
            timings.append(row)
    median = {key: round(float(np.median([t[key] for t in timings])), 3) for key in timings[0]}
    assert warm is not None and first is not None  # the loop ran at least once
    return {
        "dataset": dataset,
        "rows": ds.n,
        "features": ds.feature_shape,
        "history": len(warm.history),
        "method": warm.method,
        "message": warm.message,
        "first_call": {k: round(v, 3) for k, v in first.items()},
        "median": median,
    }
