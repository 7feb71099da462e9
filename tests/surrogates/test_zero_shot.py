"""The zero-shot ceiling analysis (`tune-agent-bench zero-shot`) on tasks that share one surface:
the same greedy rule on the sources' true values picks the target's best allowed candidate, so no
normalisation of the source GPs' predictions does better at trial 1, and the best fixed candidate over
all tasks is no worse than it."""

from __future__ import annotations

import numpy as np


def test_on_a_shared_surface_the_oracle_is_the_ceiling_of_every_normalisation() -> None:
    from agent.space import Float, SearchSpace
    from agent.tuning.zero_shot import NORMALISATIONS, zero_shot_table

    space = SearchSpace([Float("a", 0.0, 1.0), Float("b", 0.0, 1.0)])

    def surface(U: np.ndarray) -> np.ndarray:
        return -((U[:, 0] - 0.3) ** 2 + (U[:, 1] - 0.7) ** 2)

    histories = {}
    for t in range(5):
        U = np.random.default_rng(t).random((16, 2))
        histories[f"t{t}"] = (U, surface(U))
    table = zero_shot_table(
        space, histories, lambda task, U: surface(U), {t: (-1.0, 0.0) for t in histories}, sobol=64, size=3
    )
    variants = table["variants"]
    assert set(variants) == {f"{n}, {c}" for n in (*NORMALISATIONS, "oracle") for c in ("history", "history+sobol")}
    for name, row in variants.items():
        assert 0.0 <= row["regret@1"] <= 1.0 and row["regret@3"] <= row["regret@1"], name
    for c in ("history", "history+sobol"):
        oracle = variants[f"oracle, {c}"]["regret@1"]
        assert all(oracle <= variants[f"{n}, {c}"]["regret@1"] + 1e-9 for n in NORMALISATIONS)
        assert table["best_fixed_first"][c] <= oracle + 1e-9
    assert table["candidates"] == {"history": 80, "sobol": 64} and table["tasks"] == 5
