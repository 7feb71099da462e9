"""TNP: meta-training on a family of 2-d functions, fine-tuned predictions, BoTorch use, latency."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from botorch.acquisition import LogExpectedImprovement
from botorch.optim import optimize_acqf

from agent.surrogates.gp import torch_threads
from agent.surrogates.tnp import TNP, SourceBank, TNPConfig, TNPModel, build_tnp_model
from agent.surrogates.tnp_train import meta_train_tnp

CONFIG = TNPConfig(
    hidden=32,
    heads=4,
    meta_steps=250,
    meta_batch=1,
    memory_tasks=3,
    memory_points=15,
    context_max=12,
    target_extra=12,
    n_initial=4,
    seed=0,
)


def family_task(rng: np.random.Generator, n: int = 40) -> tuple[np.ndarray, np.ndarray, object]:
    """A shifted, scaled quadratic bowl plus a shared ripple, on `n` random points of `[0,1]^2`."""
    c, a = rng.uniform(0.2, 0.8, 2), rng.uniform(0.5, 2.0)

    def f(X: np.ndarray) -> np.ndarray:
        return -4 * a * ((X - c) ** 2).sum(1) + 0.3 * np.sin(5 * X[:, 0] + 3 * X[:, 1])

    X = rng.random((n, 2))
    return X, f(X), f


@pytest.fixture(scope="module")
def trained():
    rng = np.random.default_rng(0)
    sources = [family_task(rng)[:2] for _ in range(16)]
    net, history = meta_train_tnp(sources, CONFIG)
    X, y, _ = family_task(np.random.default_rng(123))
    return net, history, sources, torch.tensor(X[:5]), torch.tensor(y[:5]).reshape(-1, 1)


def test_meta_training_loss_falls(trained) -> None:
    _, history, _, _, _ = trained
    losses = np.array([h["loss"] for h in history])
    assert len(history) == CONFIG.meta_steps
    assert losses[-50:].mean() < 0.8 * losses[:50].mean()


def test_fine_tuned_predictions(trained) -> None:
    net, _, sources, X, Y = trained
    grid = torch.rand(400, 2, dtype=torch.double, generator=torch.Generator().manual_seed(0))
    far = grid[torch.cdist(grid, X).min(1).values > 0.3].unsqueeze(1)
    model = build_tnp_model(net, sources, X, Y)
    at_obs = model.posterior(X.unsqueeze(1))
    assert at_obs.variance.mean() < model.posterior(far).variance.mean()
    untrained = build_tnp_model(TNP(2, CONFIG), sources, X, Y)
    err = (at_obs.mean.reshape(-1) - Y.reshape(-1)).abs().mean()
    err_untrained = (untrained.posterior(X.unsqueeze(1)).mean.reshape(-1) - Y.reshape(-1)).abs().mean()
    assert err < err_untrained


def test_logei_gradients_flow(trained) -> None:
    net, _, sources, X, Y = trained
    model = build_tnp_model(net, SourceBank(sources), X, Y, fine_tune_steps=5)
    assert isinstance(model, TNPModel)
    Xq = torch.rand(3, 2, 2, dtype=torch.double, requires_grad=True)
    post = model.posterior(Xq)
    assert post.mean.shape == (3, 2, 1) and (post.variance > 0).all()
    acq = LogExpectedImprovement(model, best_f=Y.max())
    Xq1 = torch.rand(4, 1, 2, dtype=torch.double, requires_grad=True)
    acq(Xq1).sum().backward()
    assert Xq1.grad is not None and torch.isfinite(Xq1.grad).all() and Xq1.grad.abs().sum() > 0
    bounds = torch.stack([torch.zeros(2), torch.ones(2)]).double()
    x, _ = optimize_acqf(acq, bounds, q=1, num_restarts=2, raw_samples=32, options={"maxiter": 30})
    assert x.shape == (1, 2) and ((x >= 0) & (x <= 1)).all()


def test_save_load_and_initial_configs(trained, tmp_path: Path) -> None:
    net, _, _, X, _ = trained
    path = str(tmp_path / "tnp.pt")
    net.save(path)
    loaded = TNP.load(path)
    assert loaded.config == net.config
    init = net.initial_configs()
    assert init.shape == (CONFIG.n_initial, 2) and ((init >= 0) & (init <= 1)).all()
    assert np.allclose(loaded.initial_configs(), init)
    with torch.no_grad():  # same predictions after the round trip
        Xf = X.float()
        zf = torch.linspace(-1, 1, X.shape[0])
        a = net.predict(Xf, net.prepare(Xf, zf, []))
        b = loaded.predict(Xf, loaded.prepare(Xf, zf, []))
    assert torch.allclose(a[0], b[0]) and torch.allclose(a[1], b[1])


@pytest.mark.slow  # a speed target: measured as a benchmark (-m slow), not in the default run
def test_latency_33_sources() -> None:
    rng = np.random.default_rng(1)
    d = 4
    sources = []
    for _ in range(33):
        Xs = rng.random((100, d))
        sources.append((Xs, -((Xs - rng.random(d)) ** 2).sum(1)))
    net, bank, centre = TNP(d, TNPConfig()), SourceBank(sources), rng.random(d)
    Xt = rng.random((10, d))
    bounds = torch.stack([torch.zeros(d), torch.ones(d)]).double()
    times = []
    for step in range(5):
        t0 = time.perf_counter()
        with torch_threads(1):
            X, Y = torch.tensor(Xt), torch.tensor(-((Xt - centre) ** 2).sum(1)).reshape(-1, 1)
            model = build_tnp_model(net, bank, X, Y, seed=step)
            acq = LogExpectedImprovement(model, best_f=Y.max())
            x, _ = optimize_acqf(acq, bounds, q=1, num_restarts=4, raw_samples=128, options={"maxiter": 60})
        times.append(time.perf_counter() - t0)
        Xt = np.vstack([Xt, x.detach().numpy()])
    median = statistics.median(times)
    print(f"TNP median suggestion latency (33 x 100 sources): {median:.3f} s")
    assert median < 5.0
