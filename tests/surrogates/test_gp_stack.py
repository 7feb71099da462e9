"""A stack of source GPs built straight from their stored hyperparameters predicts what the rebuilt
BoTorch models predict, for BoTorch's default kernel and the arc kernel, and the portfolio of a study
over stored sources is scored without rebuilding one model."""

from __future__ import annotations

import numpy as np
import torch

from agent.space import Float, Int, SearchSpace
from agent.surrogates.arc import make_arc_kernel
from agent.surrogates.gp import gp_state
from agent.surrogates.gp_stack import StateMembers, _GPStack
from agent.surrogates.source_gp import fit_source_gps, restore_source_gp, source_data
from tests.surrogates.test_arc import depth_space


def _sources(space: SearchSpace, n: int = 4) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(3)
    out = []
    for k in range(n):
        U = space.snap(rng.random((12 + k, space.dim)))
        out.append((U, np.sin(3 * U[:, 0] + k) + 0.5 * U[:, -1] + 0.01 * rng.standard_normal(len(U))))
    return out


def _check(space: SearchSpace, covar) -> None:
    sources = _sources(space)
    states = [gp_state(m) for m in fit_source_gps(sources, covar=covar)]
    restored = [restore_source_gp(U, y, state, covar=covar) for (U, y), state in zip(sources, states)]
    builder = StateMembers(covar)
    from_states = _GPStack([builder.member(*source_data(U, y), state) for (U, y), state in zip(sources, states)])
    from_models = _GPStack.of_models(restored)
    X = torch.as_tensor(np.random.default_rng(4).random((9, space.dim)))
    assert torch.allclose(from_states.means_at(X), from_models.means_at(X), atol=1e-9)
    mean, cov = from_states.predict(X.reshape(3, 3, -1))
    model_mean, model_cov = from_models.predict(X.reshape(3, 3, -1))
    assert torch.allclose(mean, model_mean, atol=1e-9) and torch.allclose(cov, model_cov, atol=1e-9)
    own = torch.stack([m.posterior(X).mean.reshape(-1) for m in restored])  # each BoTorch model's own posterior
    assert torch.allclose(from_states.means_at(X), own, atol=1e-6)


def test_a_stack_from_stored_states_predicts_what_the_rebuilt_models_predict() -> None:
    _check(SearchSpace([Float("a", 0.0, 1.0), Int("b", 1, 9)]), None)


def test_an_arc_kernel_stack_from_stored_states_predicts_what_the_rebuilt_models_predict() -> None:
    space = depth_space()
    _check(space, lambda: make_arc_kernel(space))


def test_a_state_that_does_not_fit_the_template_is_refused() -> None:
    space = SearchSpace([Float("a", 0.0, 1.0)])
    (U, y), *_ = _sources(space, 1)
    state = gp_state(fit_source_gps([(U, y)])[0])
    arc_space = depth_space()
    builder = StateMembers(lambda: make_arc_kernel(arc_space))
    U2 = arc_space.snap(np.random.default_rng(0).random((10, arc_space.dim)))
    try:
        builder.member(*source_data(U2, y[:10]), state)
    except ValueError as exc:
        assert "do not fit" in str(exc)
    else:
        raise AssertionError("a plain kernel's state was taken by an arc-kernel template")


def test_the_targets_a_source_gp_is_conditioned_on_are_known_without_the_gp() -> None:
    from agent.surrogates.stored_means import conditioned_targets

    space = SearchSpace([Float("a", 0.0, 1.0), Int("b", 1, 9)])
    for U, y in _sources(space):
        model = restore_source_gp(U, y, gp_state(fit_source_gps([(U, y)])[0]))
        assert np.allclose(conditioned_targets(source_data(U, y)[1].numpy()), model.train_targets.numpy(), atol=1e-12)


def test_stored_means_of_plain_kernel_fits_equal_the_stacked_gps_without_torch(tmp_path) -> None:
    """A plain-kernel fit stored with its constrained hyperparameters gives the means its GP gives,
    in numpy (BoTorch's default RBF and a scaled Matérn-5/2), and a study process scoring a
    portfolio over such stored fits imports no torch."""
    import json
    import subprocess
    import sys

    from gpytorch.kernels import MaternKernel, ScaleKernel

    from agent.surrogates.gp_stack import stack_summary
    from agent.surrogates.source_fits import SourceFits, SourceTask
    from agent.surrogates.source_store import SourceModelStore
    from agent.surrogates.stored_means import stored_means

    space = SearchSpace([Float("a", 0.0, 1.0), Int("b", 1, 9)])
    sources = _sources(space)
    X = np.random.default_rng(5).random((11, space.dim))
    for covar in (None, lambda: ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=space.dim))):
        models = fit_source_gps(sources, covar=covar)
        summaries = [stack_summary(m) for m in models]
        expected = _GPStack.of_models(models).means_at(torch.as_tensor(X)).numpy()
        got = stored_means([(U, y, s) for (U, y), s in zip(sources, summaries)], X)
        assert np.allclose(got, expected, atol=1e-9), np.abs(got - expected).max()

    store = SourceModelStore(tmp_path / "models")
    tasks = [SourceTask(f"k{i}", f"t{i}", U, y) for i, (U, y) in enumerate(sources)]
    for task in tasks:
        SourceFits(store).gp(task)  # fitted and stored with its summary
    np.savez(
        tmp_path / "data.npz",
        X=X,
        **{f"U{i}": t.U for i, t in enumerate(tasks)},
        **{f"y{i}": t.y for i, t in enumerate(tasks)},
    )
    code = f"""
import json, sys
import numpy as np
from agent.surrogates.source_fits import SourceFits, SourceTask
from agent.surrogates.source_store import SourceModelStore
data = np.load({str(tmp_path / "data.npz")!r})
tasks = [SourceTask(f"k{{i}}", f"t{{i}}", data[f"U{{i}}"], data[f"y{{i}}"]) for i in range({len(tasks)})]
means = SourceFits(SourceModelStore({str(tmp_path / "models")!r})).means_on(tasks, data["X"])
print(json.dumps({{"torch": "torch" in sys.modules, "means": means.tolist()}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    direct = _GPStack.of_models(fit_source_gps(sources)).means_at(torch.as_tensor(X)).numpy()
    assert answer["torch"] is False and np.allclose(answer["means"], direct, atol=1e-9)
