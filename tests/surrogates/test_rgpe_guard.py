"""RGPE's negative-transfer guard: a source that ranks the target like a coin gets no weight."""

from __future__ import annotations

import numpy as np
import torch

from agent.surrogates.rgpe import fit_source_gps, rgpe_weights


def f(U: np.ndarray) -> np.ndarray:
    return np.sin(6 * U[:, 0]) + np.cos(4 * U[:, 1])


def test_shuffled_source_is_dropped_once_there_is_evidence() -> None:
    rng = np.random.default_rng(0)
    U_src = rng.random((60, 2))
    good = (U_src, f(U_src))
    shuffled = (U_src, rng.permutation(f(U_src)))
    models = fit_source_gps([good, shuffled])
    X = torch.as_tensor(rng.random((12, 2)), dtype=torch.double)
    Y = torch.as_tensor(f(X.numpy()), dtype=torch.double).reshape(-1, 1)
    w = rgpe_weights(models, None, X, Y, seed=0)
    assert w[1] == 0.0  # the shuffled source
    assert w[0] > 0.5  # the faithful source carries the ensemble
    # With 3 points there is no evidence yet: the guard keeps every source.
    w3 = rgpe_weights(models, None, X[:3], Y[:3], seed=0)
    assert float(w3[:2].sum()) > 0.0
