"""The warm-start evaluation's replay is the product's sampler restricted to a table's rows."""

from __future__ import annotations

import numpy as np

from agent.pipeline.replay import replay_order
from agent.samplers.design import initial_design
from agent.space import Float, Int, SearchSpace


def test_replay_picks_distinct_table_rows_init_first_and_finds_the_optimum() -> None:
    space = SearchSpace([Float("x", 0.0, 1.0), Int("k", 0, 8)])
    U = space.snap(initial_design("sobol", 64, 2, seed=0))
    U = np.unique(U, axis=0)
    errors = (U[:, 0] - 0.7) ** 2 + (U[:, 1] - 0.25) ** 2
    errors[3] = np.nan  # a configuration that failed on this dataset
    order = replay_order(space, errors, U, init=[0, 1], budget=15, acq="ei")
    assert order[:2] == [0, 1] and len(order) == len(set(order)) == 15
    best = np.nanmin(errors)
    assert np.nanmin(errors[order]) <= np.nanquantile(errors, 0.1)  # BO beats the table's 10 % quantile
    # a neighbour with the same surface as prior mean finds the optimum at least as fast
    prior = replay_order(space, errors, U, init=[0, 1], budget=15, acq="ei", prior={"twin": errors + 0.01})
    reached = lambda o: next((i for i, r in enumerate(o) if errors[r] == best), len(o))  # noqa: E731
    assert reached(prior) <= reached(order)
