"""RGPE's negative-transfer guard: a source that ranks the target like a coin gets no weight."""

from __future__ import annotations

import numpy as np
import torch

from agent.surrogates.rgpe import rgpe_weights
from agent.surrogates.source_gp import fit_source_gps


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
    from agent.surrogates.source_gp import informative, source_signal

    rng = np.random.default_rng(1)
    U = rng.random((60, 2))
    models = fit_source_gps([(U, f(U)), (U, rng.permutation(f(U)))])
    r2 = [source_signal(m) for m in models]
    assert r2[0] > 0.9 and r2[1] < 0.4, r2
    assert informative(models) == [True, False]


def _sources(tasks) -> tuple:
    from agent.surrogates.gp import normal_scores
    from agent.surrogates.source_fits import SourceTask

    return tuple(SourceTask(f"k{i}", f"task-{i}", U, normal_scores(y)) for i, (U, y) in enumerate(tasks))


def _run(name: str, sources: tuple, models_dir, seed: int, steps: int = 10) -> list[tuple[dict, str]]:
    """``steps`` suggestions of the product's sampler on the surrogate ``name``."""
    from agent.config import StudySettings
    from agent.knowledge.records import TRIAL_OK, TrialRecord
    from agent.samplers.bo import BoSampler
    from agent.space import Float, SearchSpace
    from agent.surrogates import registry
    from agent.surrogates.contract import SurrogateInputs

    space = SearchSpace([Float("a", 0.0, 1.0), Float("b", 0.0, 1.0)])
    surrogate = registry.prepare(registry.Resolution(name), SurrogateInputs(space, sources, models_dir, seed=seed))
    settings = StudySettings(
        job="j",
        job_name="j",
        dataset="d",
        dataset_name="d",
        fingerprint="f",
        space_signature=space.signature(),
        metric="m",
        mode="max",
        trials=steps,
        n_init=5,
        seed=seed,
    )
    sampler, trials = BoSampler(space, settings, surrogate), []
    for number in range(steps):
        s = sampler.suggest(number, trials)
        u = space.encode(s.config)
        trials.append(TrialRecord(str(number), number, TRIAL_OK, s.config, float(f(u[None])[0]), s.origin))
    return [(dict(t.config), t.origin) for t in trials]


def test_rgpe_over_noise_history_runs_as_gp(tmp_path) -> None:
    """With only noise sources the guard leaves none: the whole study is gp's, step for step."""
    rng = np.random.default_rng(2)
    noise = _sources([(U, rng.random(40)) for U in (rng.random((40, 2)) for _ in range(3))])
    assert _run("rgpe", noise, tmp_path, seed=3) == _run("gp", (), tmp_path, seed=3)


def test_tnp_stands_aside_when_the_history_is_noise(tmp_path) -> None:
    """The TNP attends only to informative sources; with none it runs as gp, without loading a net."""
    from agent.pipeline.metamodels import tnp_settings, train_tnp
    from agent.space import Float, SearchSpace
    from agent.surrogates import registry
    from agent.surrogates.contract import SurrogateInputs

    rng = np.random.default_rng(4)
    tasks = [(U, rng.random(40)) for U in (rng.random((40, 2)) for _ in range(4))]
    assert _run("tnp", _sources(tasks), tmp_path / "no-net", seed=5) == _run("gp", (), tmp_path, seed=5)

    # A history with a surface keeps its sources in the bank.
    space = SearchSpace([Float("a", 0.0, 1.0), Float("b", 0.0, 1.0)])
    faithful = _sources([(U_, f(U_)) for U_, _ in tasks])
    train_tnp(
        list(faithful),
        "j",
        space.signature(),
        tmp_path / "net",
        tnp_settings({"meta_steps": 5, "hidden": 16, "heads": 2}),
    )
    surrogate = registry.prepare(registry.Resolution("tnp"), SurrogateInputs(space, faithful[1:], tmp_path / "net"))
    assert surrogate.name == "tnp" and len(surrogate.bank) == 3
