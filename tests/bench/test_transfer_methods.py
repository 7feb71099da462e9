"""RGPE and TNP inside the lcbench harness, and the shuffled-history control (tiny settings)."""

from __future__ import annotations

import numpy as np
import pytest

from agent.bench import transfer_methods
from agent.bench.lcbench import BenchConfig, apply_control, make_histories, run_benchmark
from agent.bench.lcbench_cli import DEFAULT_FOLDER, history_through_store
from agent.bench.yahpo import YahpoScenario


@pytest.fixture(scope="module")
def scenario() -> YahpoScenario:
    return YahpoScenario.load(DEFAULT_FOLDER)


def test_rgpe_and_tnp_run_in_the_harness(scenario, tmp_path, monkeypatch) -> None:
    from agent.surrogates.tnp import TNPConfig

    monkeypatch.setenv("TUNE_AGENT_BENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(transfer_methods, "_config", lambda: TNPConfig(meta_steps=10, hidden=16, heads=2))
    monkeypatch.setattr(transfer_methods, "TNP_FOLDS", 2)
    tasks = scenario.instances[:3]
    config = BenchConfig(tasks=tasks, seeds=1, budget=4, history_size=15, workers=1, reference_size=500)
    histories = make_histories(scenario, config.history_size, config.history_seed, config.target)
    paths = transfer_methods.pretrain_tnp_folds([histories[t] for t in scenario.instances])
    assert len(paths) == 2 and all(p.exists() for p in paths)
    result = run_benchmark(scenario, {"rgpe": transfer_methods.RgpeSearch, "tnp": transfer_methods.TnpSearch}, config)
    for method in ("rgpe", "tnp"):
        curves = np.asarray(result["regret"][method])
        assert curves.shape == (3, 4)
        assert (curves >= 0).all() and (np.diff(curves, axis=1) <= 1e-12).all()


def test_shuffled_control_keeps_configs_and_permutes_responses(scenario) -> None:
    histories = make_histories(scenario, 10, 0)
    shuffled = apply_control(histories, "shuffled", 0)
    for t in histories:
        np.testing.assert_array_equal(histories[t][0], shuffled[t][0])
        np.testing.assert_allclose(np.sort(histories[t][1]), np.sort(shuffled[t][1]))
    assert any(not np.allclose(histories[t][1], shuffled[t][1]) for t in histories)


def test_history_survives_the_mlflow_round_trip(scenario, tmp_path) -> None:
    small = {t: h for t, h in list(make_histories(scenario, 4, 0).items())[:3]}
    timing = history_through_store(scenario, small, f"sqlite:///{tmp_path / 'h.db'}")
    assert timing["rows"] == 12 and timing["read_seconds"] >= 0


def test_fold_models_are_named_by_their_training_sources(scenario) -> None:
    histories = make_histories(scenario, 6, 0)
    real = [histories[t] for t in scenario.instances]
    shuffled_map = apply_control(histories, "shuffled", 0)
    shuffled = [shuffled_map[t] for t in scenario.instances]
    key = transfer_methods._config_key()
    fold = transfer_methods.fold_of(7)
    by_fold = transfer_methods._fold_sources(real, fold)
    # a worker sees every task but its target, and must find the network trained outside its fold
    worker_view = [h for i, h in enumerate(real) if i != 7]
    assert transfer_methods._fold_sources(worker_view, fold, 7) == by_fold
    assert all(transfer_methods.fold_of(i) != fold for i, h in enumerate(real) if any(h is s for s in by_fold))
    path = transfer_methods._fold_path(fold, len(real), key, by_fold)
    assert path == transfer_methods._fold_path(fold, len(real), key, transfer_methods._fold_sources(worker_view, fold, 7))
    assert path != transfer_methods._fold_path(fold, len(real), key, transfer_methods._fold_sources(shuffled, fold))
