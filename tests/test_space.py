"""Search spaces: encoding round trips, bins, conditions, signatures."""

from __future__ import annotations

import numpy as np
import pytest

from agent.errors import SpaceError
from agent.space import INACTIVE, Categorical, Condition, Float, Int, SearchSpace


def make_space() -> SearchSpace:
    return SearchSpace(
        [
            Float("lr", 1e-5, 1.0, log=True),
            Int("layers", 1, 9),
            Int("units", 16, 512, log=True),
            Categorical("opt", ("sgd", "adam")),
            Float("momentum", 0.0, 0.99, condition=Condition("opt", ("sgd",))),
        ]
    )


def test_decode_encode_round_trip_on_random_points() -> None:
    space = make_space()
    rng = np.random.default_rng(0)
    for u in rng.random((200, space.dim)):
        config = space.decode(u)
        space.validate(config)
        assert space.decode(space.encode(config)) == pytest.approx(config)


def test_integers_own_equal_bins_and_hit_their_ends() -> None:
    p = Int("layers", 1, 9)
    values = [p.from_unit(u) for u in np.linspace(0, 1, 901)]
    counts = np.bincount(values)[1:]
    assert set(values) == set(range(1, 10))
    assert counts.max() - counts.min() <= 2  # each of 9 integers gets ~1/9 of the cube
    assert p.from_unit(p.to_unit(7)) == 7


def test_log_float_maps_midpoint_to_geometric_mean() -> None:
    p = Float("lr", 1e-4, 1e-2, log=True)
    assert p.from_unit(0.5) == pytest.approx(1e-3)
    assert p.to_unit(1e-2) == pytest.approx(1.0)


def test_conditional_parameter_inactive_encodes_to_constant() -> None:
    space = make_space()
    adam = {"lr": 0.01, "layers": 3, "units": 64, "opt": "adam"}
    sgd = dict(adam, opt="sgd", momentum=0.9)
    assert space.encode(adam)[-1] == INACTIVE
    mask = space.active_mask(np.stack([space.encode(adam), space.encode(sgd)]))
    assert mask[:, -1].tolist() == [False, True]
    assert "momentum" not in space.decode(space.encode(adam))


@pytest.mark.parametrize(
    "config",
    [
        {"lr": 0.01, "layers": 3, "units": 64},  # missing opt
        {"lr": 0.01, "layers": 3, "units": 64, "opt": "adam", "momentum": 0.5},  # inactive set
        {"lr": 5.0, "layers": 3, "units": 64, "opt": "adam"},  # out of range
        {"lr": 0.01, "layers": 3.5, "units": 64, "opt": "adam"},  # not an integer
        {"lr": 0.01, "layers": 3, "units": 64, "opt": "rmsprop"},  # unknown choice
        {"lr": 0.01, "layers": 3, "units": 64, "opt": "adam", "extra": 1},
    ],
)
def test_validate_rejects_bad_configs(config: dict) -> None:
    with pytest.raises(SpaceError):
        make_space().validate(config)


def test_bad_spaces_are_rejected() -> None:
    with pytest.raises(SpaceError):
        Float("x", 1.0, 1.0)
    with pytest.raises(SpaceError):
        Float("x", 0.0, 1.0, log=True)
    with pytest.raises(SpaceError):
        SearchSpace([Float("x", 0, 1, condition=Condition("y", (1,))), Int("y", 0, 2)])


def test_serialisation_and_signature_are_stable() -> None:
    space = make_space()
    again = SearchSpace.from_dict(space.to_dict())
    assert again == space
    assert again.signature() == space.signature()
    changed = SearchSpace(list(space.params[:-1]) + [Float("momentum", 0.0, 0.9, condition=Condition("opt", ("sgd",)))])
    assert changed.signature() != space.signature()


def test_snap_is_idempotent() -> None:
    space = make_space()
    U = np.random.default_rng(1).random((20, space.dim))
    once = space.snap(U)
    np.testing.assert_allclose(space.snap(once), once)


def test_configurations_of_another_space_match_by_name_and_type_and_translate() -> None:
    from agent.space import Categorical, Condition, Float, Int, SearchSpace

    target = SearchSpace(
        [
            Float("lr", 1e-4, 0.5, log=True),
            Int("layers", 1, 3),
            Categorical("act", ("relu", "tanh")),
            Int("units_2", 8, 64, condition=Condition("layers", (2, 3))),
            Float("new", 0.0, 1.0),
        ]
    )
    other = [
        {"lr": 0.9, "layers": 2, "act": "relu", "units_2": 7.5, "decay": 0.1},
        {"lr": 0.01, "layers": 1, "act": "gelu"},
    ]
    match = target.match(other)
    assert match.matched == ("lr", "layers") and match.unmatched == ("act", "units_2", "new")
    config = target.decode(target.translate(other[0], match))
    assert config["lr"] == pytest.approx(0.5) and config["layers"] == 2  # clipped into range; matched values kept
    assert set(config) == {"lr", "layers", "act", "units_2", "new"}  # the rest from the cube's centre
    assert "shares 2 hyperparameters with this space (lr, layers); 3 others" in match.note("job x")
