"""Deterministic operations on a loaded :class:`Dataset`: split, sample, describe.

All randomness comes from ``numpy.random.default_rng(seed)``, so the same dataset
and seed give the same indices in every process.
"""

from __future__ import annotations

import math

import numpy as np

from agent.data.dataset import Dataset
from agent.errors import DatasetError


def split_dataset(ds: Dataset, val_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Stratified, seeded train/validation split; returns sorted (train_idx, val_idx).

    Each class puts ``round(val_fraction * n_c)`` instances in validation, clamped so
    that a class with at least two instances has one on each side.
    """
    if not 0.0 < val_fraction < 1.0:
        raise DatasetError(f"validation fraction must be between 0 and 1, got {val_fraction}")
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in range(ds.num_classes):
        idx = rng.permutation(np.flatnonzero(ds.y == c))
        k = int(round(val_fraction * len(idx)))
        if len(idx) >= 2:
            k = min(max(k, 1), len(idx) - 1)
        val.append(idx[:k])
        train.append(idx[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


def _allocate(counts: np.ndarray, n: int) -> np.ndarray:
    """Split ``n`` over classes proportionally to ``counts`` (largest remainder)."""
    exact = counts / counts.sum() * n
    alloc = np.minimum(np.floor(exact).astype(np.int64), counts)
    order = np.argsort(-(exact - alloc), kind="stable")
    i = 0
    while alloc.sum() < n:
        c = order[i % len(order)]
        if alloc[c] < counts[c]:
            alloc[c] += 1
        i += 1
    return alloc


def sample_dataset(ds: Dataset, n: int = 256, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A fixed-size stratified, seeded sample ``(X_sample, y_sample)``.

    Sampling is without replacement. When ``ds.n <= n`` every instance is returned
    once, in a seeded shuffled order (so the sample has ``ds.n`` rows, not ``n``).
    """
    if n < 1:
        raise DatasetError(f"sample size must be positive, got {n}")
    rng = np.random.default_rng(seed)
    if ds.n <= n:
        idx = rng.permutation(ds.n)
    else:
        counts = np.bincount(ds.y, minlength=ds.num_classes)
        alloc = _allocate(counts, n)
        idx = np.concatenate(
            [rng.choice(np.flatnonzero(ds.y == c), size=int(k), replace=False) for c, k in enumerate(alloc)]
        )
        idx = rng.permutation(idx)
    return ds.X[idx], ds.y[idx]


def describe_dataset(ds: Dataset) -> dict[str, float | int | str]:
    """Simple statistics of a dataset as plain JSON-serialisable Python values, and its content
    digest (:mod:`agent.data.content`)."""
    from agent.data.content import content_print

    counts = np.bincount(ds.y, minlength=ds.num_classes).astype(np.float64)
    p = counts / counts.sum()
    nz = p[p > 0]
    entropy = float(-(nz * np.log2(nz)).sum())
    X = ds.X.reshape(ds.n, -1).astype(np.float64)
    n_features = int(X.shape[1])
    per_feature_std = X.std(axis=0)
    return {
        "name": ds.name,
        "source": ds.source,
        "kind": ds.kind,
        "fingerprint": ds.fingerprint,
        "content": content_print(ds.X, ds.y).digest,  # what the data is, whatever its name or order
        "n": ds.n,
        "num_classes": ds.num_classes,
        "n_features": n_features,
        "log_n": math.log(ds.n),
        "instances_per_feature": ds.n / n_features,
        "class_entropy": entropy,
        "class_entropy_normalised": entropy / math.log2(ds.num_classes),
        "min_class_fraction": float(p.min()),
        "max_class_fraction": float(p.max()),
        "imbalance_ratio": float(counts.max() / max(counts.min(), 1.0)),
        "feature_mean": float(X.mean()),
        "feature_std": float(X.std()),
        "feature_min": float(X.min()),
        "feature_max": float(X.max()),
        "mean_feature_std": float(per_feature_std.mean()),
        "constant_feature_fraction": float((per_feature_std == 0).mean()),
        "zero_fraction": float((X == 0).mean()),
        **({"preparation": ds.preparation} if ds.preparation else {}),
    }
