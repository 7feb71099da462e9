"""The arc kernel (paper 002): activity from the cube point, eq. 4's distances, a GP that fits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agent.errors import SpaceError
from agent.space import Categorical, Condition, Float, Int, SearchSpace
from agent.surrogates.arc import make_arc_kernel, resolve_kernel


def depth_space() -> SearchSpace:
    return SearchSpace(
        [
            Float("lr", 1e-4, 1e-1, log=True),
            Int("layers", 1, 3),
            Int("units_2", 16, 512, log=True, condition=Condition("layers", (2, 3))),
            Float("dropout_3", 0.0, 0.8, condition=Condition("units_2", tuple(range(16, 513)))),  # chained
            Categorical("act", ("relu", "tanh")),
            Float("mom_tanh", 0.1, 0.99, condition=Condition("act", ("tanh",))),
        ]
    )


def test_activity_read_from_the_cube_matches_the_space_also_between_bins() -> None:
    space = depth_space()
    kernel = make_arc_kernel(space)
    rng = np.random.default_rng(0)
    U = rng.random((400, space.dim))  # raw, unsnapped points, as the acquisition optimiser makes them
    expected = space.active_mask(U)[:, kernel.cond]
    got = kernel.active(torch.as_tensor(U)).numpy().astype(bool)
    assert (got == expected).mean() > 0.995  # only exact bin edges may differ
    snapped = space.snap(U)
    assert (
        kernel.active(torch.as_tensor(snapped)).numpy().astype(bool) == space.active_mask(snapped)[:, kernel.cond]
    ).all()


def test_embedding_distances_follow_eq_4() -> None:
    space = SearchSpace([Int("layers", 1, 2), Float("u2", 0.0, 1.0, condition=Condition("layers", (2,)))])
    kernel = make_arc_kernel(space)
    deep = lambda u: space.encode({"layers": 2, "u2": u})  # noqa: E731
    shallow = space.encode({"layers": 1})
    z = kernel.embed(torch.as_tensor(np.stack([shallow, shallow, deep(0.2), deep(0.7)]))).detach()
    omega, rho = float(kernel.omega[0].detach()), float(kernel.rho[0].detach())
    cond = lambda a, b: float(torch.linalg.norm(z[a, 1:] - z[b, 1:]))  # noqa: E731 - the conditional dim's plane
    assert cond(0, 1) == pytest.approx(0.0)  # both inactive
    assert cond(0, 2) == pytest.approx(omega) and cond(0, 3) == pytest.approx(omega)  # one inactive
    arc = omega * math.sqrt(2) * math.sqrt(1 - math.cos(math.pi * rho * (0.7 - 0.2)))
    assert cond(2, 3) == pytest.approx(arc)  # both active: the chord of the arc


def test_a_gp_with_the_arc_kernel_fits_and_ranks_depths() -> None:
    from agent.surrogates.gp import fit_gp

    space = depth_space()
    rng = np.random.default_rng(1)
    U = space.snap(rng.random((40, space.dim)))
    depth = np.array([space.decode(u)["layers"] for u in U])
    y = -((depth - 2.0) ** 2) + 0.1 * rng.normal(size=len(U))  # two layers are best
    X = torch.as_tensor(U)
    model = fit_gp(X, torch.as_tensor(y).reshape(-1, 1), covar_module=make_arc_kernel(space))
    test = space.snap(rng.random((200, space.dim)))
    with torch.no_grad():
        mean = model.posterior(torch.as_tensor(test)).mean.reshape(-1).numpy()
    d = np.array([space.decode(u)["layers"] for u in test])
    assert mean[d == 2].mean() > mean[d != 2].mean()


def test_kernel_choice() -> None:
    assert resolve_kernel("auto", depth_space()) == "arc"
    plain = SearchSpace([Float("x", 0.0, 1.0)])
    assert resolve_kernel("auto", plain) == "plain" and resolve_kernel("plain", depth_space()) == "plain"
    with pytest.raises(SpaceError, match="needs a search space with conditional"):
        resolve_kernel("arc", plain)
    with pytest.raises(SpaceError, match="--kernel must be one of"):
        resolve_kernel("rbf", plain)


@pytest.mark.slow  # a benchmark run: `pytest -m slow` (keeps the default run under 10 minutes)
def test_bench_arc_makes_the_table_from_real_studies(store, cli, tmp_path) -> None:
    """Tiny version of paper 002's Table 1: two BO studies of mlp-arch on iris, six models, 3 folds."""
    import json

    args = (
        "bench",
        "arc",
        "--dataset",
        "iris",
        "--studies",
        "2",
        "--trials",
        "8",
        "--epochs",
        "1",
        "--folds",
        "3",
        "--bo-seeds",
        "1",
        "--out",
        str(tmp_path),
        *store.args,
    )
    res = cli(*args)
    assert res.code == 0, res.err
    report = json.loads((tmp_path / "metrics" / "arc.json").read_text())
    assert set(report["models"]) == {
        "separate_linear",
        "separate_gp",
        "separate_arc_gp",
        "linear",
        "gp",
        "arc_gp",
        "arc_gp_mode",
    }
    assert all(np.isfinite(v["original"][0]) and np.isfinite(v["log"][0]) for v in report["models"].values())
    assert report["paper_table_1"]["arc_gp"] == {"original": 0.421, "log": 0.335}
    assert "16 finished trials" in report["protocol"]
    assert set(report["bo"]) == {"protocol", "arc", "plain"} and 0 <= report["bo"]["arc"]["best_error@8"] <= 1
    for kernel in ("arc", "plain"):  # one seed: its own curve at trial 8 (the last) stands for trials 10 and 30
        seeds = report["bo"][kernel]["per_seed"]
        assert seeds["best_error@10"] == seeds["best_error@30"] == [report["bo"][kernel]["best_error@8"]]
    assert cli(*args).code == 0  # the studies are there: the second run only re-makes the table
    assert len([s for s in store.kb().list_studies() if s.name.startswith("arc-data-")]) == 2


def test_arc_kernel_gps_stack_into_one_batched_prediction() -> None:
    """RGPE over arc-kernel GPs (a conditional space) predicts through one batched stack: the same
    means and covariances as each GP's own posterior, to rounding."""
    from agent.surrogates.arc import make_arc_kernel
    from agent.surrogates.gp_stack import _GPStack, _ModelLoop, _predictor
    from agent.surrogates.rgpe import RGPE
    from agent.surrogates.source_gp import fit_source_gps

    space = depth_space()
    rng = np.random.default_rng(0)
    sources = []
    for k in range(3):
        U = space.snap(rng.random((14, space.dim)))
        sources.append((U, np.sin(3 * U[:, 0] + k) + U[:, -1]))
    models = fit_source_gps(sources, covar=lambda: make_arc_kernel(space))
    stack = _predictor(models)
    assert isinstance(stack, _GPStack) and stack.arc is not None
    X = torch.as_tensor(rng.random((5, 2, space.dim)))
    mean, cov = stack.predict(X)
    loop_mean, loop_cov = _ModelLoop(models).predict(X)
    assert torch.allclose(mean, loop_mean, atol=1e-6) and torch.allclose(cov, loop_cov, atol=1e-6)
    assert torch.allclose(stack.predict_mean(X), loop_mean, atol=1e-6)
    ensemble = RGPE(models, torch.tensor([0.5, 0.3, 0.2]))
    assert torch.isfinite(ensemble.posterior(X).mean).all()
