"""The evaluation's pure parts: source folds, neighbour order, portfolio, rank correlation, summary."""

from __future__ import annotations

import numpy as np

from agent.meta.neighbours import distinct_first
from agent.pipeline.evaluation import portfolio_rows
from agent.pipeline.evaluation_tables import best_rows, rank_correlation, source_folds, summarise, table_regrets


def test_source_folds_keep_each_source_whole_and_balance_datasets() -> None:
    sources = ["a"] * 5 + ["b"] * 4 + ["c"] * 3 + ["d"] * 3 + ["e"] * 1 + ["f"] * 2
    folds = source_folds(sources, 3, seed=0)
    for s in set(sources):
        assert len({int(f) for f, x in zip(folds, sources) if x == s}) == 1, s
    sizes = np.bincount(folds)
    assert len(sizes) == 3 and sizes.max() - sizes.min() <= 2
    assert (source_folds(sources, 3, seed=0) == folds).all()  # seeded


def test_distinct_first_takes_one_dataset_per_source_before_a_second() -> None:
    sources = ["wine", "wine", "iris", "wine", "digits"]
    assert distinct_first([0, 1, 2, 3, 4], sources) == [0, 2, 4, 1, 3]
    assert distinct_first([3, 2], sources) == [3, 2]


def test_best_rows_and_portfolio_on_a_table() -> None:
    E = np.array([[0.1, 0.5, 0.9, 0.3], [0.2, 0.4, 0.1, 0.8], [0.1, 0.6, 0.9, 0.7]])
    assert best_rows(E, [0, 2], 2) == [0, 1]  # dataset 2's best (row 0) is taken: its next best
    R = table_regrets(E)
    assert R.min() == 0.0 and R.max() == 1.0 and R[0, 0] == 0.0
    # Row 0 is best for datasets 0 and 2 and fair for 1; row 2 then covers dataset 1.
    assert portfolio_rows(E, [0, 1, 2], 2) == [0, 2]
    assert portfolio_rows(E, [1], 1) == [2]


def test_rank_correlation_is_one_when_features_order_like_targets() -> None:
    targets = np.array([[0, 1, 2, 3, 4.0], [1, 0, 1, 2, 3], [2, 1, 0, 1, 2], [3, 2, 1, 0, 1], [4, 3, 2, 1, 0]])
    assert rank_correlation(targets * 5 + 1, targets, 0, [1, 2, 3, 4]) == 1.0
    assert rank_correlation(-targets, targets, 0, [1, 2, 3, 4]) == -1.0
    assert np.isnan(rank_correlation(targets, targets, 0, [1, 2]))


def test_summarise_reports_regret_and_a_paired_test_against_cold() -> None:
    rng = np.random.default_rng(0)
    per = [
        {"cold": np.array([0.5, 0.4, 0.3]) + rng.random(3) * 0.1, "warm": np.array([0.1, 0.05, 0.0])} for _ in range(12)
    ]
    out = summarise(per)
    assert out["warm"]["regret@1"] == 0.1 and out["cold"]["regret@1"] > 0.5
    assert out["warm"]["p_vs_cold@1"] < 0.01 and "p_vs_cold@1" not in out["cold"]
    assert "regret@5" not in out["warm"]  # curves of 3 trials
