"""The neighbours' prior mean inside a real BoTorch GP."""

from __future__ import annotations

import numpy as np
import torch

from agent.space import Float, SearchSpace
from agent.surrogates.gp import fit_gp
from agent.surrogates.neighbour_mean import NeighbourMean, fit_neighbour_surface


def f(U: np.ndarray) -> np.ndarray:
    return -((U[:, 0] - 0.8) ** 2) - (U[:, 1] - 0.2) ** 2


def test_prior_mean_carries_the_neighbour_surface_where_the_target_has_no_data() -> None:
    rng = np.random.default_rng(0)
    U_n = rng.random((30, 2))
    surface = fit_neighbour_surface(U_n, f(U_n) + 0.05)  # a shifted copy: same shape
    X = torch.tensor([[0.1, 0.9], [0.5, 0.5]], dtype=torch.double)
    Y = torch.as_tensor(f(X.numpy()), dtype=torch.double).reshape(-1, 1)
    test = torch.as_tensor(rng.random((200, 2)), dtype=torch.double)
    truth = f(test.numpy())
    with_prior = fit_gp(X, Y, mean_module=NeighbourMean([surface])).posterior(test).mean.detach().numpy().ravel()
    constant = fit_gp(X, Y).posterior(test).mean.detach().numpy().ravel()
    corr = lambda a: np.corrcoef(a, truth)[0, 1]  # noqa: E731
    assert corr(with_prior) > 0.9 > corr(constant)


def test_neighbour_prior_drives_a_bo_step_towards_the_neighbours_optimum() -> None:
    space = SearchSpace([Float("a", 0.0, 1.0), Float("b", 0.0, 1.0)])
    rng = np.random.default_rng(1)
    U_n = rng.random((40, 2))
    U = np.array([[0.1, 0.9], [0.3, 0.7], [0.2, 0.5]])
    u = _gp_step(space, (U_n, f(U_n)), U, f(U))
    assert np.linalg.norm(u - np.array([0.8, 0.2])) < 0.3


def _gp_step(space: SearchSpace, neighbour: tuple, U: np.ndarray, y: np.ndarray) -> np.ndarray:
    """One step of the product's sampler on the gp surrogate whose prior mean is ``neighbour``'s surface."""
    from agent.config import StudySettings
    from agent.samplers.bo import BoSampler
    from agent.surrogates.contract import SurrogateInputs
    from agent.surrogates.gp import normal_scores
    from agent.surrogates.source_fits import SourceTask
    from agent.surrogates.specs import GpSurrogate

    source = SourceTask("n", "neighbour", neighbour[0], normal_scores(neighbour[1]))
    surrogate = GpSurrogate(SurrogateInputs(space, (source,), prior_mean="neighbours", neighbour_keys=("n",)))
    assert surrogate.mean_kind == "neighbours"
    settings = StudySettings(
        job="j",
        job_name="j",
        dataset="d",
        dataset_name="d",
        fingerprint="f",
        space_signature=space.signature(),
        metric="m",
        mode="max",
        trials=10,
        n_init=1,
    )
    u, _ = BoSampler(space, settings, surrogate).propose(U, y, U, 1, 0, np.random.default_rng(0))
    return u


def test_neighbours_are_chosen_from_the_targets_observations() -> None:
    """With no dataset sample, the nearest sources are those whose surfaces order the target's
    observations alike; they are re-chosen as observations arrive."""
    from agent.surrogates.neighbour_mean import ObservationNeighbours, observation_distances

    rng = np.random.default_rng(3)
    g = lambda U: -((U[:, 0] - 0.1) ** 2) - (U[:, 1] - 0.9) ** 2  # noqa: E731 - the opposite corner
    sources = []
    for i in range(4):
        U = rng.random((30, 2))
        sources.append((U, 2.0 * f(U) + i if i < 2 else g(U)))  # 0, 1 like the target (other scales)
    neighbours = ObservationNeighbours(sources, k=2)
    before = neighbours()  # no observations yet: every source
    assert neighbours.chosen == [0, 1, 2, 3] and len(before._surfaces) == 4
    U_t = rng.random((8, 2))
    d = observation_distances(neighbours.surfaces, U_t, f(U_t))
    assert max(d[:2]) < min(d[2:])
    mean = neighbours(U_t, f(U_t))
    assert sorted(neighbours.chosen) == [0, 1] and len(mean._surfaces) == 2
    X = torch.as_tensor(U_t, dtype=torch.double)
    model = fit_gp(X, torch.as_tensor(f(U_t), dtype=torch.double).reshape(-1, 1), mean_module=mean)
    test = torch.as_tensor(rng.random((100, 2)), dtype=torch.double)
    pred = model.posterior(test).mean.detach().numpy().ravel()
    assert np.corrcoef(pred, f(test.numpy()))[0, 1] > 0.9
