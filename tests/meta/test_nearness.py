"""Knowing when history does not apply: the new dataset's distance against the history's own."""

from __future__ import annotations

import numpy as np

from agent.tuning.warmstart import NeighbourInfo, WarmStart, nearness


def test_a_dataset_farther_than_any_historical_one_is_far() -> None:
    rng = np.random.default_rng(0)
    # Two sources, five related datasets each, the sources a few units apart.
    vectors = np.vstack([rng.normal(0.0, 0.3, (5, 4)), rng.normal(0.0, 0.3, (5, 4)) + [3.0, 0, 0, 0]])
    sources = ["a"] * 5 + ["b"] * 5
    near = nearness(vectors[0] + 0.05, vectors, sources, standardise=False)
    assert near is not None and not near.far and near.ratio < 1.0
    # Its own source's datasets do not count as its nearest other-source neighbours: the history's
    # distances are the gaps between the two sources (about 3), not within them (about 0.4).
    assert 2.0 < near.median <= near.largest < 4.5
    far = nearness(np.array([0.0, 40.0, 0.0, 0.0]), vectors, sources, standardise=False)
    assert far is not None and far.far and far.ratio > 5
    assert nearness(vectors[0], vectors[:1], sources[:1], standardise=False) is None  # nothing to compare


def test_a_far_dataset_takes_no_seeds_from_its_neighbours() -> None:
    n = NeighbourInfo("iris", "k", 9.0, {"x": 1}, 0.5)
    assert WarmStart("handcrafted", (n,), far=False).seeds == [({"x": 1}, "warm:handcrafted:iris")]
    far = WarmStart("handcrafted", (n,), far=True, distance_ratio=12.0)
    assert far.seeds == []
    assert WarmStart.from_record(far.to_record()) == far  # resume sees the same decision
