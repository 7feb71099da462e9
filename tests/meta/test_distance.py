"""Target distances: metric properties, NaN handling, normalisation invariances, surrogate bridge, EMD."""

from __future__ import annotations

import numpy as np
import pytest

from agent.pipeline.distances import (
    NORMALISATIONS,
    emd_distance_matrix,
    error_matrix,
    normalise_errors,
    surrogate_error_matrix,
    target_distance_matrix,
)


def _random_errors(n: int = 6, m: int = 20, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.05, 0.9, size=(n, m))


@pytest.mark.parametrize("how", NORMALISATIONS)
def test_metric_properties(how: str) -> None:
    E = _random_errors()
    E[3] = E[1]  # identical histories
    D = target_distance_matrix(E, how)
    assert D.shape == (6, 6)
    assert np.allclose(D, D.T) and np.allclose(np.diag(D), 0.0)
    assert (D >= 0).all() and D[1, 3] == pytest.approx(0.0)
    for i in range(6):
        for j in range(6):
            assert (D[i, j] <= D[i] + D[:, j] + 1e-12).all()


def test_mean_not_sum_and_nan_handling() -> None:
    E = np.array(
        [
            [0.1, 0.2, 0.3, 0.4, np.nan, 0.5],
            [0.2, 0.3, 0.4, 0.5, 0.6, np.nan],
            [np.nan, np.nan, 0.1, 0.2, 0.3, np.nan],
            [np.nan, np.nan, np.nan, np.nan, np.nan, np.nan],
        ]
    )
    D = target_distance_matrix(E, "raw")
    assert D[0, 1] == pytest.approx(0.1)  # mean |diff| over the 4 shared configs
    assert np.isnan(D[0, 2])  # only 2 shared finite configs
    assert D[1, 2] == pytest.approx(0.3)  # 3 shared
    assert np.isnan(D[3]).all() and np.isnan(D[:, 3]).all()
    assert np.isnan(normalise_errors(E, "rank")[0, 4])


def test_normalisations() -> None:
    E = np.array([[0.4, 0.1, np.nan, 0.1, 0.7], [0.5, 0.5, 0.5, 0.5, 0.5]])
    R = normalise_errors(E, "rank")
    assert np.allclose(R[0, [0, 1, 3, 4]], [2 / 3, 1 / 6, 1 / 6, 1.0])
    S = normalise_errors(E, "standard")
    assert np.nanmean(S[0]) == pytest.approx(0.0) and np.nanstd(S[0]) == pytest.approx(1.0)
    assert np.allclose(S[1], 0.0)
    assert np.array_equal(normalise_errors(E, "raw"), E, equal_nan=True)
    with pytest.raises(ValueError):
        normalise_errors(E, "bogus")


@pytest.mark.parametrize("transform", [lambda e: 0.5 * e + 0.2, lambda e: e**2])
def test_rank_invariant_to_monotone_transform_raw_is_not(transform) -> None:
    E = _random_errors(seed=1)
    T = E.copy()
    T[2] = transform(E[2])
    assert np.allclose(target_distance_matrix(E, "rank"), target_distance_matrix(T, "rank"))
    assert not np.allclose(target_distance_matrix(E, "raw"), target_distance_matrix(T, "raw"))


def test_error_matrix() -> None:
    E = error_matrix([{"a": 0.1, "b": 0.2, "zzz": 1.0}, {"b": 0.3, "c": float("nan")}], ["a", "b", "c"])
    assert np.array_equal(E, np.array([[0.1, 0.2, np.nan], [np.nan, 0.3, np.nan]]), equal_nan=True)


def _smooth(U: np.ndarray) -> np.ndarray:
    return 0.3 + 0.2 * np.sin(3 * U[:, 0]) * np.cos(2 * U[:, 1])


def _other(U: np.ndarray) -> np.ndarray:
    return 0.6 - 0.25 * (U[:, 0] - 0.8) ** 2 + 0.2 * U[:, 1]


def test_surrogate_bridges_different_configs() -> None:
    rng = np.random.default_rng(0)
    points = [rng.random((30, 2)) for _ in range(3)]
    errors = [_smooth(points[0]), _smooth(points[1]), _other(points[2])]
    errors[1][4] = np.nan  # a failed trial is imputed, not fatal
    P = surrogate_error_matrix(points, errors, n_points=64, seed=0)
    assert P.shape == (3, 64) and np.isfinite(P).all()
    D = target_distance_matrix(P, "raw")
    assert D[0, 1] < 0.05
    assert D[0, 2] > 3 * D[0, 1] and D[1, 2] > 3 * D[0, 1]
    again = surrogate_error_matrix(points, errors, n_points=64, seed=0)
    assert np.allclose(P, again, atol=1e-6)


def test_surrogate_degenerate_inputs() -> None:
    pts = [np.random.default_rng(1).random((5, 2)), np.random.default_rng(2).random((5, 2))]
    P = surrogate_error_matrix(pts, [np.full(5, np.nan), np.full(5, 0.3)], n_points=8)
    assert np.isnan(P[0]).all() and np.allclose(P[1], 0.3)
    with pytest.raises(ValueError):
        surrogate_error_matrix([np.zeros((2, 2)), np.zeros((2, 3))], [np.zeros(2), np.zeros(2)])


def test_emd_identical_zero_and_shift_larger() -> None:
    rng = np.random.default_rng(3)
    base = rng.uniform(0.1, 0.5, size=100)
    E = np.vstack([base, rng.permutation(base), base + 0.1, base + 0.3])
    D = emd_distance_matrix(E, bins=10)
    assert D[0, 1] == pytest.approx(0.0, abs=1e-12)
    assert np.allclose(D, D.T) and np.allclose(np.diag(D), 0.0)
    assert 0 < D[0, 2] < D[0, 3]
    assert D[0, 3] == pytest.approx(0.3, abs=0.05)  # ground cost in error units
    E[1, :] = np.nan
    assert np.isnan(emd_distance_matrix(E)[1]).all()
    R = emd_distance_matrix(E[[0, 2, 3]], how="rank")
    assert np.allclose(R, 0.0)  # shifts are monotone: identical rank histograms
