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


def test_source_without_a_surface_is_not_informative() -> None:
    from agent.surrogates.rgpe import informative, source_signal

    rng = np.random.default_rng(1)
    U = rng.random((60, 2))
    models = fit_source_gps([(U, f(U)), (U, rng.permutation(f(U)))])
    r2 = [source_signal(m) for m in models]
    assert r2[0] > 0.9 and r2[1] < 0.4, r2
    assert informative(models) == [True, False]


def test_harness_falls_back_to_the_cold_start_design_when_the_history_is_noise() -> None:
    """RGPE in the benchmark: with only noise sources it runs exactly as gp."""
    from agent.bench.methods import GpSearch
    from agent.bench.transfer_methods import RgpeSearch
    from agent.space import Float, SearchSpace

    space = SearchSpace([Float("a", 0.0, 1.0), Float("b", 0.0, 1.0)])
    rng = np.random.default_rng(2)
    history = [(U, rng.random(40)) for U in (rng.random((40, 2)) for _ in range(3))]
    rgpe, gp = RgpeSearch(space), GpSearch(space)
    rgpe.start(0, history, seed=3)
    gp.start(0, history, seed=3)
    U, y = np.empty((0, 2)), np.empty(0)
    for _ in range(10):  # the whole run is gp's: Sobol design, GP steps, the interleaved random one
        u = rgpe.suggest(U, y)
        np.testing.assert_allclose(u, gp.suggest(U, y))
        U, y = np.vstack([U, u]), np.append(y, f(u[None])[0])


def test_tnp_stands_aside_when_the_history_is_noise(tmp_path, monkeypatch) -> None:
    """TNP in the benchmark: it attends only to informative sources; with none it runs as gp."""
    from agent.bench import transfer_methods
    from agent.bench.methods import GpSearch
    from agent.bench.transfer_methods import TnpSearch, pretrain_tnp_folds
    from agent.space import Float, SearchSpace
    from agent.surrogates.tnp import TNPConfig

    monkeypatch.setenv("TUNE_AGENT_BENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(transfer_methods, "_config", lambda: TNPConfig(meta_steps=5, hidden=16, heads=2))
    monkeypatch.setattr(transfer_methods, "TNP_FOLDS", 2)
    space = SearchSpace([Float("a", 0.0, 1.0), Float("b", 0.0, 1.0)])
    rng = np.random.default_rng(4)
    tasks = [(U, rng.random(40)) for U in (rng.random((40, 2)) for _ in range(4))]
    pretrain_tnp_folds(tasks)
    history = tasks[1:]  # target is task 0
    tnp, gp = TnpSearch(space), GpSearch(space)
    tnp.start(0, history, seed=5)
    gp.start(0, history, seed=5)
    U, y = np.empty((0, 2)), np.empty(0)
    for _ in range(10):  # the whole run is gp's
        u = tnp.suggest(U, y)
        np.testing.assert_allclose(u, gp.suggest(U, y))
        U, y = np.vstack([U, u]), np.append(y, f(u[None])[0])
    assert "tnp" not in tnp.context.cache  # the network was never consulted

    # A history with a surface keeps its sources in the bank.
    faithful = [(U_, f(U_)) for U_, _ in tasks]
    pretrain_tnp_folds(faithful)
    tnp.start(0, faithful[1:], seed=5)
    tnp.suggest(np.empty((0, 2)), np.empty(0))
    assert len(tnp.context.cache["bank"]) == 3
