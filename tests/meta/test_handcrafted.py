"""Hand-crafted meta-features: coverage, sanity of landmarkers, determinism, speed, scaling."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits, load_iris

from agent.meta.handcrafted import (
    HANDCRAFTED_NAMES,
    HANDCRAFTED_VERSION,
    LANDMARK_NAMES,
    handcrafted_metafeatures,
    is_current,
    metafeature_matrix,
    standardise_columns,
)


def _sample(X: np.ndarray, y: np.ndarray, n: int = 256, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    idx = np.random.default_rng(seed).permutation(len(y))[:n]
    return X[idx], y[idx]


@pytest.mark.parametrize("loader", [load_digits, load_iris, load_breast_cancer])
def test_real_datasets_give_all_names_finite(loader) -> None:
    data = loader()
    X, y = _sample(data.data, data.target)
    mf = handcrafted_metafeatures(X, y)
    assert tuple(k for k in mf if k != "version") == HANDCRAFTED_NAMES and mf["version"] == HANDCRAFTED_VERSION
    assert all(type(v) is float for v in mf.values())
    for name, value in mf.items():
        assert math.isfinite(value), name
    for name in LANDMARK_NAMES:
        assert 0.0 <= mf[name] <= 1.0


def test_digits_images_and_landmarker_quality() -> None:
    data = load_digits()
    X, y = _sample(data.images, data.target)  # 256 x 8 x 8, flattened inside
    mf = handcrafted_metafeatures(X, y)
    assert mf["landmark_1nn"] > 0.8
    assert mf["num_classes"] == 10.0
    assert mf["log_n_features"] == pytest.approx(math.log(64))


def test_random_images_random_labels() -> None:
    rng = np.random.default_rng(1)
    X = rng.random((256, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, size=256)
    mf = handcrafted_metafeatures(X, y)
    assert set(mf) == set(HANDCRAFTED_NAMES) | {"version"}
    assert mf["landmark_1nn"] < 0.4
    assert all(math.isfinite(mf[n]) for n in HANDCRAFTED_NAMES)


def test_summary_overrides_sizes() -> None:
    data = load_iris()
    X, y = _sample(data.data, data.target, n=60)
    summary = {
        "n": 150000,
        "log_n": math.log(150000),
        "n_features": 4,
        "num_classes": 3,
        "instances_per_feature": 37500.0,
        "class_entropy": 1.2,
    }
    mf = handcrafted_metafeatures(X, y, summary=summary)
    assert mf["log_n_instances"] == pytest.approx(math.log(150000))
    assert mf["log_instances_per_feature"] == pytest.approx(math.log(37500.0))
    assert mf["class_entropy"] == 1.2
    assert mf["sample_class_entropy"] != 1.2


def test_tiny_classes_do_not_crash() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 5))
    y = np.array([0] * 17 + [1, 1, 2])  # class 1 has two instances, class 2 a single one
    mf = handcrafted_metafeatures(X, y)
    assert all(math.isfinite(mf[n]) or math.isnan(mf[n]) for n in HANDCRAFTED_NAMES)
    assert math.isfinite(mf["landmark_1nn"])
    single = handcrafted_metafeatures(X, np.zeros(20, dtype=int))
    assert all(math.isnan(single[n]) for n in LANDMARK_NAMES)


def test_deterministic_for_seed() -> None:
    data = load_breast_cancer()
    X, y = _sample(data.data, data.target)
    a = handcrafted_metafeatures(X, y, seed=3)
    b = handcrafted_metafeatures(X, y, seed=3)
    assert a == b


@pytest.mark.slow
def test_timing_256x784() -> None:
    rng = np.random.default_rng(2)
    X = (rng.random((256, 784)) > 0.7) * rng.random((256, 784))
    y = rng.integers(0, 10, size=256)
    handcrafted_metafeatures(X, y)  # warm imports
    start = time.perf_counter()
    handcrafted_metafeatures(X, y, seed=1)
    assert time.perf_counter() - start < 2.0


def test_metafeature_matrix_order_and_missing() -> None:
    M = metafeature_matrix([{"num_classes": 3.0, "unknown": 1.0}, {}])
    assert M.shape == (2, len(HANDCRAFTED_NAMES))
    j = HANDCRAFTED_NAMES.index("num_classes")
    assert M[0, j] == 3.0
    assert np.isnan(np.delete(M[0], j)).all() and np.isnan(M[1]).all()


def test_standardise_columns_constant_and_nan() -> None:
    M = np.array([[1.0, 5.0, np.nan, 2.0], [3.0, 5.0, np.nan, np.nan], [5.0, 5.0, np.nan, 4.0]])
    Z, mean, std = standardise_columns(M)
    assert np.allclose(Z[:, 0], [-1.2247449, 0.0, 1.2247449])
    assert np.allclose(Z[:, 1], 0.0) and std[1] == 1.0
    assert np.isnan(Z[:, 2]).all() and np.isfinite(mean).all() and np.isfinite(std).all()
    assert np.allclose(Z[[0, 2], 3], [-1.0, 1.0]) and np.isnan(Z[1, 3])
    new = (np.array([3.0, 5.0, 0.0, 3.0]) - mean) / std
    assert np.allclose(new[[0, 1, 3]], 0.0)


def test_a_table_in_other_units_has_the_same_meta_features() -> None:
    """Version 2: every statistic is unit-free (version 1 moved 58 % of the starter's tables'
    five nearest neighbours when their columns changed units)."""
    data = load_breast_cancer()
    X, y = _sample(data.data, data.target)
    scaled = X * 10.0 ** np.random.default_rng(0).uniform(-3, 3, size=X.shape[1])
    a, b = handcrafted_metafeatures(X, y), handcrafted_metafeatures(scaled, y)
    for name in HANDCRAFTED_NAMES:
        assert a[name] == pytest.approx(b[name], rel=1e-6, abs=1e-9), name


def test_modality_is_a_feature_and_old_versions_are_not_current() -> None:
    data = load_digits()
    X, y = _sample(data.images, data.target)
    image = handcrafted_metafeatures(X, y, summary={"kind": "image"})
    table = handcrafted_metafeatures(X.reshape(len(X), -1), y, summary={"kind": "tabular"})
    assert (image["modality_image"], image["modality_table"]) == (1.0, 0.0)
    assert (table["modality_image"], table["modality_table"]) == (0.0, 1.0)
    assert is_current(image) and not is_current({"num_classes": 10.0}) and not is_current(None)
