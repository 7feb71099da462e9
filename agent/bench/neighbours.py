"""Warm-start latency: meta-features of a new dataset plus the neighbour search over N datasets.

The N historical meta-feature vectors are drawn at random (their values do not change the cost of
a Euclidean search); the new dataset is real and goes through the real featurisers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np


def measure_neighbour_search(dataset: str, n_history: int, models_dir: Path, k: int = 3, seed: int = 0) -> dict[str, Any]:
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
        out[featurizer.method] = {"metafeatures_s": round(mid - start, 4), "search_s": round(end - mid, 4),
                                  "total_s": round(end - start, 4), "found": len(found)}
    return out
