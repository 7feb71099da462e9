"""Initial designs and one real BO step (BoTorch + GPyTorch, no mocks)."""

from __future__ import annotations

import numpy as np
import pytest

from agent.config import INIT_METHODS, StudyRequest, StudySettings
from agent.errors import TuneAgentError
from agent.samplers.acquisition import build_acquisition, optimize_on_space, structural_fixings
from agent.samplers.design import initial_design
from agent.space import INACTIVE, Categorical, Condition, Float, Int, SearchSpace
from agent.surrogates.gp import impute_failures, ucb_beta
from agent.tuning.study import cold_sampler


def propose_next(space: SearchSpace, U: np.ndarray, y: np.ndarray, acq: str, iteration: int, seed: int) -> np.ndarray:
    """One BO step of the product's sampler on the cold GP."""
    settings = StudySettings(
        job="j",
        job_name="j",
        dataset="d",
        dataset_name="d",
        fingerprint="f",
        space_signature=space.signature(),
        metric="m",
        mode="max",
        trials=len(y) + 1,
        n_init=1,
        acq=acq,
        random_every=0,
        seed=seed,
    )
    u, _ = cold_sampler(space, settings).propose(U, y, U, iteration, seed, np.random.default_rng(seed))
    return u


@pytest.mark.parametrize("method", INIT_METHODS)
def test_designs_are_seeded_in_the_cube_and_distinct(method: str) -> None:
    a = initial_design(method, 7, 4, seed=3)
    b = initial_design(method, 7, 4, seed=3)
    c = initial_design(method, 7, 4, seed=4)
    assert a.shape == (7, 4)
    assert ((a >= 0) & (a <= 1)).all()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    assert len({tuple(r) for r in a}) == 7


def test_lhs_stratifies_each_dimension() -> None:
    pts = initial_design("lhs", 10, 3, seed=0)
    for j in range(3):
        assert sorted(np.floor(pts[:, j] * 10).astype(int)) == list(range(10))


def test_unknown_design_is_bad_input() -> None:
    with pytest.raises(TuneAgentError):
        initial_design("grid", 3, 2, seed=0)


def test_ucb_beta_grows_with_iterations() -> None:
    betas = [ucb_beta(t, 6) for t in (1, 5, 20, 100)]
    assert all(b2 > b1 for b1, b2 in zip(betas, betas[1:]))


def test_failures_are_imputed_with_the_worst_value() -> None:
    np.testing.assert_allclose(impute_failures(np.array([1.0, np.nan, -2.0])), [1.0, -2.0, -2.0])


@pytest.mark.parametrize("acq", ["logei", "ucb"])
def test_bo_step_moves_towards_the_optimum(acq: str) -> None:
    """On a smooth 2-d bowl a BO step proposes a new, valid point near the best region."""
    space = SearchSpace([Float("x", 0.0, 1.0), Int("k", 0, 10)])
    f = lambda u: -((u[:, 0] - 0.7) ** 2 + (u[:, 1] - 0.3) ** 2)  # noqa: E731
    U = space.snap(initial_design("sobol", 8, 2, seed=0))
    y = f(U)
    u = propose_next(space, U, y, acq, iteration=1, seed=0)
    config = space.decode(u)
    space.validate(config)
    assert not any(np.allclose(u, row) for row in U)
    if acq == "logei":
        assert f(u[None])[0] > np.median(y)


def test_bo_step_handles_categoricals_and_failures() -> None:
    space = SearchSpace([Float("x", 0.0, 1.0), Categorical("c", ("a", "b", "c"))])
    U = space.snap(initial_design("random", 6, 2, seed=1))
    y = np.where(np.arange(6) % 3 == 0, np.nan, -np.abs(U[:, 0] - 0.5))
    config = space.decode(propose_next(space, U, y, "logei", iteration=1, seed=0))
    assert config["c"] in ("a", "b", "c")


def test_every_fourth_cold_gp_step_is_an_unseen_random_configuration() -> None:
    """Interleaved random search (SMAC's): steps 4, 8, ... after the design; 0 turns it off."""
    from agent.knowledge.records import TRIAL_OK, TrialRecord
    from agent.samplers.acquisition import interleaved_random, random_unseen

    assert [s for s in range(1, 13) if interleaved_random(s, 4)] == [4, 8, 12]
    assert not any(interleaved_random(s, every=0) for s in range(1, 13))

    space = SearchSpace([Float("x", 0.0, 1.0), Int("k", 0, 3)])
    U = space.snap(initial_design("sobol", 3, 2, seed=0))
    fresh = random_unseen(space, U, np.random.default_rng(0), candidate=U[1])
    assert not any(np.allclose(fresh, row) for row in U)

    def settings(every: int) -> StudySettings:
        return StudySettings(
            job="j",
            job_name="j",
            dataset="d",
            dataset_name="d",
            fingerprint="f",
            space_signature=space.signature(),
            metric="m",
            mode="max",
            trials=12,
            n_init=2,
            random_every=every,
        )

    f = lambda u: -((u[0] - 0.7) ** 2)  # noqa: E731
    origins = {}
    for every in (4, 0):
        sampler, history = cold_sampler(space, settings(every)), []
        for number in range(6):
            s = sampler.suggest(number, history)
            u = space.encode(s.config)
            history.append(TrialRecord(str(number), number, TRIAL_OK, s.config, float(f(u)), s.origin))
        origins[every] = [t.origin for t in history]
    assert origins[4] == ["init:sobol"] * 2 + ["bo:logei"] * 3 + ["random:interleaved"]
    assert origins[0] == ["init:sobol"] * 2 + ["bo:logei"] * 4
    with pytest.raises(TuneAgentError, match="--random-every"):
        StudyRequest(dataset="d", job="j", random_every=-1)  # the request is where options are checked


def test_stall_detector_fires_after_five_bo_steps_without_improvement() -> None:
    from agent.knowledge.records import TRIAL_OK, TrialRecord
    from agent.samplers.bo import FALLBACK_ORIGIN, stalled

    def trials(values: list[float], origins: list[str]) -> list[TrialRecord]:
        return [TrialRecord(str(i), i, TRIAL_OK, {}, v, o) for i, (v, o) in enumerate(zip(values, origins))]

    flat = trials([0.9, 0.5, 0.6, 0.7, 0.8, 0.85], ["init:rgpe"] + ["bo:logei"] * 5)
    assert stalled(flat, sign=1.0)  # five BO steps, none above the 0.9 the portfolio found
    assert not stalled(flat, sign=-1.0)  # minimising, 0.5 improved on 0.9
    assert not stalled(flat[:5], sign=1.0)  # too few trials to tell
    design = trials([0.9, 0.5, 0.6, 0.7, 0.8, 0.85], ["init:rgpe"] + ["init:sobol"] * 4 + ["bo:logei"])
    assert not stalled(design, sign=1.0)  # design points are not the transfer model's steps
    values, origins = [0.9, 0.5, 0.6, 0.7, 0.8, 0.85, 0.1], ["init:rgpe"] + ["bo:logei"] * 5 + [FALLBACK_ORIGIN]
    assert not stalled(trials(values, origins), sign=1.0)  # the target GP just had its step
    assert stalled(trials(values + [0.2], origins + ["bo:logei"]), sign=1.0)  # they alternate
    improved = trials(values[:-1] + [0.95], origins)
    assert not stalled(improved, sign=1.0)  # the fallback found a better value: the count restarts


def test_a_stalled_transfer_surrogate_alternates_with_the_target_gp() -> None:
    """The sampler hands every other step to the surrogate's fallback (the target's own GP) while
    the transfer model has not improved for five BO steps, and only then."""
    from agent.knowledge.records import TRIAL_OK, TrialRecord
    from agent.samplers.bo import FALLBACK_ORIGIN, BoSampler
    from agent.surrogates.contract import StepModel, Surrogate, SurrogateInputs
    from agent.surrogates.gp import fit_gp
    from agent.surrogates.specs import GpSurrogate

    space = SearchSpace([Float("x", 0.0, 1.0), Float("z", 0.0, 1.0)])

    class Stubborn(Surrogate):
        """A transfer-like surrogate (no interleaved random steps) whose GP sees the target."""

        name, interleave_random = "stubborn", False

        def step_model(self, train_X, train_Y, state):  # type: ignore[no-untyped-def]
            return StepModel(fit_gp(train_X, train_Y), source_weight=1.0)

        def fallback(self) -> Surrogate:
            return GpSurrogate(SurrogateInputs(space, seed=0))

    settings = StudySettings(
        job="j",
        job_name="j",
        dataset="d",
        dataset_name="d",
        fingerprint="f",
        space_signature=space.signature(),
        metric="m",
        mode="max",
        trials=20,
        n_init=1,
    )
    sampler = BoSampler(space, settings, Stubborn())
    history = [TrialRecord("0", 0, TRIAL_OK, {"x": 0.5, "z": 0.5}, 1.0, "init:sobol")]
    history += [TrialRecord(str(i), i, TRIAL_OK, {"x": 0.1 * i, "z": 0.9}, 0.0, "bo:logei") for i in range(1, 6)]
    assert sampler.suggest(6, history).origin == FALLBACK_ORIGIN
    history.append(TrialRecord("6", 6, TRIAL_OK, {"x": 0.9, "z": 0.1}, 0.0, FALLBACK_ORIGIN))
    assert sampler.suggest(7, history).origin == "bo:logei"  # back to the transfer model
    assert sampler.suggest(7, history[:5]).origin == "bo:logei"  # four steps: not stalled yet


def _layered_space() -> SearchSpace:
    deep = lambda k: Condition("layers", tuple(range(k, 4)))  # noqa: E731
    return SearchSpace(
        [
            Float("lr", 0.0, 1.0),
            Int("layers", 1, 3),
            Float("w1", 0.0, 1.0),
            Float("w2", 0.0, 1.0, condition=deep(2)),
            Float("w3", 0.0, 1.0, condition=deep(3)),
        ]
    )


def test_structures_fix_the_parent_and_every_inactive_dimension() -> None:
    space = _layered_space()
    fixings = structural_fixings(space)
    assert fixings == [
        {1: Int("layers", 1, 3).to_unit(1), 3: INACTIVE, 4: INACTIVE},
        {1: Int("layers", 1, 3).to_unit(2), 4: INACTIVE},
        {1: Int("layers", 1, 3).to_unit(3)},
    ]
    assert structural_fixings(SearchSpace([Float("x", 0.0, 1.0), Int("k", 0, 10)])) is None
    cats = structural_fixings(SearchSpace([Float("x", 0.0, 1.0), Categorical("c", ("a", "b"))]))
    assert cats == [{1: 0.25}, {1: 0.75}]
    wide = SearchSpace([Int("n", 1, 100), Float("x", 0.0, 1.0, condition=Condition("n", (1,)))])
    assert structural_fixings(wide) is None  # 100 structures: the whole cube at once instead


@pytest.mark.parametrize("kernel", ["arc", "plain"])
def test_a_conditional_space_is_searched_per_structure(kernel: str) -> None:
    """The acquisition's maximiser (a real GP, arc or plain kernel) sits in one structure: its
    parent at a value's centre and its inactive dimensions where trials have them; and it finds the
    depth where the trials were good."""
    import torch

    space = _layered_space()
    rng = np.random.default_rng(0)
    U = space.snap(rng.random((14, space.dim)))
    configs = [space.decode(u) for u in U]
    y = np.array([-(c["layers"] != 2) - (c["w1"] - 0.3) ** 2 for c in configs])  # depth 2 is best
    settings = StudySettings(
        job="j",
        job_name="j",
        dataset="d",
        dataset_name="d",
        fingerprint="f",
        space_signature=space.signature(),
        metric="m",
        mode="max",
        trials=20,
        n_init=1,
        seed=0,
        kernel=kernel,
    )
    sampler = cold_sampler(space, settings)
    X = torch.as_tensor(U, dtype=torch.double)
    Y = torch.as_tensor(y, dtype=torch.double).reshape(-1, 1)
    model = sampler.surrogate.step_model(X, Y, {}).model
    x = optimize_on_space(build_acquisition(model, Y, "logei", 1, space.dim), space, seed=0)
    assert any(all(x[i] == v for i, v in fixed.items()) for fixed in structural_fixings(space))
    assert space.decode(x)["layers"] == 2
