"""Hand-crafted dataset meta-features: the baseline descriptor of paper 000 and Feurer et al. (2015).

This module owns the fixed vector of simple, statistical and landmarking meta-features computed
from a dataset *sample* (at most a few hundred instances), plus the helpers that stack such
vectors into a matrix and z-score it. Use it whenever datasets have to be compared without a
learned extractor: as the baseline for nearest-dataset warm starts and as a sanity reference for
the learned meta-features. Sizes (instances, features, classes) come from the full dataset's
``describe_dataset`` summary when one is given, because a sample hides them.

Version 2 (:data:`HANDCRAFTED_VERSION`) places datasets by what they are, not by their units: every
statistic of the sample is taken after each column is standardised (a table in dollars and the same
table in thousands of dollars get the same vector; with raw means, spreads and 1-NN, PCA and LDA
landmarks, 58 % of the starter history's tables get other five nearest neighbours when their
columns are put in other units), the columns' kind (binary,
discrete) is counted, and the data's modality (image grid, sequence, table) is a feature of its
own, so an image dataset's nearest neighbours are image datasets when the history has any.
``tune-agent-bench neighbours --sanity`` measures both (docs/benchmarks/warm-start.md, "Neighbours that make sense").

Every value is a plain ``float``, finite or NaN; the output is deterministic for a seed and takes
well under half a second on a 256 x 784 sample.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

SIZE_NAMES = ("log_n_instances", "log_n_features", "num_classes", "log_instances_per_feature", "class_entropy")
SAMPLE_NAMES = (
    "sample_class_entropy",
    "min_class_fraction",
    "max_class_fraction",
    "feature_skewness_mean",
    "feature_kurtosis_mean",
    "zero_fraction",
    "binary_fraction",
    "discrete_fraction",
    "mean_abs_correlation",
    "pca_fraction_95",
)
MODALITY_NAMES = ("modality_image", "modality_sequence", "modality_table")
MODALITIES = {"image": "modality_image", "sequence": "modality_sequence", "tabular": "modality_table"}
DISCRETE_VALUES = 10  # a column with at most this many distinct values in the sample is discrete
LANDMARK_NAMES = ("landmark_1nn", "landmark_naive_bayes", "landmark_stump", "landmark_lda")
HANDCRAFTED_NAMES: tuple[str, ...] = SIZE_NAMES + SAMPLE_NAMES + MODALITY_NAMES + LANDMARK_NAMES
HANDCRAFTED_VERSION = 2  # stored meta-features of another version are recomputed from the sample

MAX_CORRELATION_FEATURES = 50
CV_FOLDS = 3
PCA_VARIANCE = 0.95


def _entropy_bits(y: np.ndarray) -> float:
    counts = np.bincount(y).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def _size_features(X: np.ndarray, y: np.ndarray, summary: Mapping[str, Any] | None) -> dict[str, float]:
    """Sizes of the full dataset from ``summary``; the sample's own sizes when it is missing."""
    s = dict(summary or {})
    rows, columns = int(X.shape[0]), int(X.shape[1])
    n = float(s.get("n", rows))
    n_features = float(s.get("n_features", columns))
    return {
        "log_n_instances": float(s.get("log_n", math.log(max(n, 1.0)))),
        "log_n_features": math.log(max(n_features, 1.0)),
        "num_classes": float(s.get("num_classes", len(np.unique(y)))),
        # on a log scale: on a linear one a 10,000-row table of 3 columns is 14 standard deviations from the history
        "log_instances_per_feature": math.log(
            max(float(s.get("instances_per_feature", n / max(n_features, 1.0))), 1e-9)
        ),
        "class_entropy": float(s.get("class_entropy", _entropy_bits(y))),
    }


def _standardised(X: np.ndarray) -> np.ndarray:
    """Each column z-scored over the sample (a constant column becomes 0): what every statistic
    below is taken on, so that no feature depends on a column's units."""
    means, stds = X.mean(axis=0), X.std(axis=0)
    live = stds > 1e-12 * np.maximum(1.0, np.abs(means))
    Z = np.zeros_like(X)
    Z[:, live] = (X[:, live] - means[live]) / stds[live]
    return Z


def _moment_features(X: np.ndarray) -> dict[str, float]:
    """The shape of the columns (skewness, excess kurtosis, over non-constant ones), where their
    zeros are, and how many are binary or discrete: all independent of the columns' units."""
    means, stds = X.mean(axis=0), X.std(axis=0)
    live = stds > 1e-12 * np.maximum(1.0, np.abs(means))
    if live.any():
        z = (X[:, live] - means[live]) / stds[live]
        skew = float((z**3).mean(axis=0).mean())
        kurt = float((z**4).mean(axis=0).mean() - 3.0)
        distinct = np.array([len(np.unique(col)) for col in X[:, live].T])
        binary, discrete = float((distinct <= 2).mean()), float((distinct <= DISCRETE_VALUES).mean())
    else:
        skew = kurt = binary = discrete = math.nan
    return {
        "feature_skewness_mean": skew,
        "feature_kurtosis_mean": kurt,
        "zero_fraction": float((X == 0).mean()),
        "binary_fraction": binary,
        "discrete_fraction": discrete,
    }


def _modality(summary: Mapping[str, Any] | None) -> dict[str, float]:
    """The data's modality as indicators (all 0 when the summary does not say)."""
    kind = MODALITIES.get(str((summary or {}).get("kind", "")))
    return {name: float(name == kind) for name in MODALITY_NAMES}


def _mean_abs_correlation(X: np.ndarray, rng: np.random.Generator) -> float:
    """Mean |Pearson r| over pairs of a random subset of at most 50 non-constant features."""
    live = np.flatnonzero(X.std(axis=0) > 0)
    if live.size < 2:
        return math.nan
    cols = rng.choice(live, size=min(live.size, MAX_CORRELATION_FEATURES), replace=False)
    corr = np.corrcoef(X[:, np.sort(cols)], rowvar=False)
    upper = np.abs(corr[np.triu_indices_from(corr, k=1)])
    return float(np.nanmean(upper)) if np.isfinite(upper).any() else math.nan


def _pca_fraction(X: np.ndarray) -> float:
    """Fraction of the available principal components needed to explain 95% of the variance."""
    centred = X - X.mean(axis=0)
    # Eigenvalues of the n x n Gram matrix equal the squared singular values; cheap for n << F.
    small = centred @ centred.T if X.shape[0] <= X.shape[1] else centred.T @ centred
    eig = np.clip(np.linalg.eigvalsh(small)[::-1], 0.0, None)
    total = eig.sum()
    if total <= 0:
        return math.nan
    k = int(np.searchsorted(np.cumsum(eig) / total, PCA_VARIANCE) + 1)
    return float(min(k, eig.size) / min(X.shape))


def _landmark_models(seed: int) -> dict[str, Callable[[], Any]]:
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.tree import DecisionTreeClassifier

    return {
        "landmark_1nn": lambda: KNeighborsClassifier(n_neighbors=1),
        "landmark_naive_bayes": lambda: GaussianNB(),
        "landmark_stump": lambda: DecisionTreeClassifier(max_depth=1, random_state=seed),
        "landmark_lda": lambda: LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto"),
    }


def _span_projection(X: np.ndarray, train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates of train/test rows in the span of the centred training rows (for F > n).

    The class means and scatter of the training fold live in that span, so shrinkage LDA there
    is close to LDA on all features while solving an n x n instead of an F x F system.
    """
    centre = X[train].mean(axis=0)
    _, s, vt = np.linalg.svd(X[train] - centre, full_matrices=False)
    basis = vt[s > s[0] * 1e-10] if s.size and s[0] > 0 else vt[:1]
    return (X[train] - centre) @ basis.T, (X[test] - centre) @ basis.T


def _landmarkers(X: np.ndarray, y: np.ndarray, seed: int) -> dict[str, float]:
    """Stratified-CV accuracy of cheap learners; singleton classes are dropped, NaN if impossible.

    Uses ``min(3, smallest class size)`` folds so that every class appears in every test fold.
    """
    from sklearn.model_selection import StratifiedKFold

    nan = {name: math.nan for name in LANDMARK_NAMES}
    counts = np.bincount(y)
    keep = np.isin(y, np.flatnonzero(counts >= 2))
    X, y = X[keep], y[keep]
    kept_counts = counts[counts >= 2]
    if kept_counts.size < 2:
        return nan
    folds = StratifiedKFold(n_splits=int(min(CV_FOLDS, kept_counts.min())), shuffle=True, random_state=seed)
    splits = list(folds.split(X, y))
    out = {}
    for name, make in _landmark_models(seed).items():
        out[name] = _cv_accuracy(make, X, y, splits, project=name == "landmark_lda")
    return out


def _cv_accuracy(make: Callable[[], Any], X: np.ndarray, y: np.ndarray, splits: list, project: bool = False) -> float:
    correct = 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for train, test in splits:
                X_train, X_test = X[train], X[test]
                if project and X.shape[1] > len(train):
                    X_train, X_test = _span_projection(X, train, test)
                model = make().fit(X_train, y[train])
                correct += int((model.predict(X_test) == y[test]).sum())
    except (ValueError, np.linalg.LinAlgError):
        return math.nan
    return correct / len(y)


def handcrafted_metafeatures(
    X: np.ndarray, y: np.ndarray, summary: Mapping[str, Any] | None = None, seed: int = 0
) -> dict[str, float]:
    """Meta-features of a dataset sample `n x ...` with integer labels, keyed by HANDCRAFTED_NAMES.

    Args:
        summary: the full dataset's ``describe_dataset`` dict; supplies the size features.
        seed: fixes the correlation feature subset and the landmarkers' CV folds.
    """
    X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
    y = np.asarray(y).astype(np.int64).reshape(-1)
    if X.shape[0] != y.shape[0] or X.shape[0] == 0:
        raise ValueError(f"X and y must be non-empty and aligned, got {X.shape[0]} and {y.shape[0]}")
    X = np.nan_to_num(X, nan=0.0, posinf=0.0, neginf=0.0)
    with threadpool_limits(1):  # BLAS threads fighting over busy cores cost seconds here
        return _compute(X, y, summary, seed)


def _compute(X: np.ndarray, y: np.ndarray, summary: Mapping[str, Any] | None, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    fractions = np.bincount(y)[np.unique(y)] / len(y)
    out = _size_features(X, y, summary)
    out.update(
        sample_class_entropy=_entropy_bits(y),
        min_class_fraction=float(fractions.min()),
        max_class_fraction=float(fractions.max()),
    )
    out.update(_moment_features(X))
    out.update(_modality(summary))
    Z = _standardised(X)  # PCA, the 1-NN and LDA landmarks are unit-free on z-scored columns
    out["mean_abs_correlation"] = _mean_abs_correlation(X, rng)
    out["pca_fraction_95"] = _pca_fraction(Z)
    out.update(_landmarkers(Z, y, seed))
    return {**{name: _clean(out[name]) for name in HANDCRAFTED_NAMES}, "version": float(HANDCRAFTED_VERSION)}


def is_current(record: Mapping[str, Any] | None) -> bool:
    """Whether stored meta-features were made by this version (else they are recomputed)."""
    return bool(record) and int(float(record.get("version", 1))) == HANDCRAFTED_VERSION  # type: ignore[union-attr]


def _clean(value: Any) -> float:
    v = float(value)
    return v if math.isfinite(v) else math.nan


def metafeature_matrix(rows: Sequence[Mapping[str, float]]) -> np.ndarray:
    """Stacks meta-feature dicts into `n x len(HANDCRAFTED_NAMES)`; missing entries become NaN."""
    nan = math.nan
    table = [[nan if (v := row.get(name)) is None else v for name in HANDCRAFTED_NAMES] for row in rows]
    return np.array(table, dtype=float).reshape(len(rows), len(HANDCRAFTED_NAMES))


def standardise_columns(M: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Z-scores each column ignoring NaN; returns ``(Z, mean, std)`` to scale new rows alike.

    A constant column gets std 1 (so it maps to 0); an all-NaN column gets mean 0 and std 1 and
    stays NaN. NaN entries stay NaN.
    """
    M = np.asarray(M, dtype=np.float64)
    finite = np.isfinite(M)
    count = finite.sum(axis=0)
    filled = np.where(finite, M, 0.0)
    mean = np.divide(filled.sum(axis=0), count, out=np.zeros(M.shape[1]), where=count > 0)
    sq = np.where(finite, (M - mean) ** 2, 0.0).sum(axis=0)
    std = np.sqrt(np.divide(sq, count, out=np.zeros(M.shape[1]), where=count > 0))
    std = np.where(std > 0, std, 1.0)
    Z = np.where(finite, (M - mean) / std, np.nan)
    return Z, mean, std
