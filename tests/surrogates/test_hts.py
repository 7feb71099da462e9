"""HTS (paper 001): the learned map moves a source's good configurations to the target's good region."""

from __future__ import annotations

import numpy as np

from agent.surrogates.hts import hts_round, lhs, rbf_surrogate


def test_rbf_surrogate_interpolates_and_tolerates_duplicates() -> None:
    U = lhs(30, 2, seed=0)
    y = -((U - 0.4) ** 2).sum(1)
    s = rbf_surrogate(np.vstack([U, U[:3]]), np.concatenate([y, y[:3]]))
    assert np.allclose(s(U), y, atol=1e-4)


def test_the_map_sends_the_source_optimum_towards_the_target_optimum() -> None:
    source_opt, target_opt = np.array([0.25, 0.3]), np.array([0.7, 0.75])
    f_s = lambda U: -((U - source_opt) ** 2).sum(1)  # noqa: E731 - values are maximised
    f_t = lambda U: -((U - target_opt) ** 2).sum(1)  # noqa: E731 - the same landscape, shifted
    U_s = lhs(60, 2, seed=1)
    U_t = lhs(8, 2, seed=2)  # the m initial target evaluations
    mapped = hts_round(U_s, f_s(U_s), U_t, f_t(U_t), seed=0)
    best_source = U_s[np.argsort(-f_s(U_s))[:3]]
    assert mapped.shape == U_s.shape and (mapped >= 0).all() and (mapped <= 1).all()
    assert f_t(mapped[:3]).mean() > f_t(best_source).mean() + 0.1  # mapping beats reusing the source's best
    assert f_t(mapped[:3]).mean() > f_t(U_t).max() - 0.02  # and is as good as the target's best LHS point


def test_the_anchored_map_is_the_identity_while_the_target_surrogate_cannot_predict() -> None:
    """hts-anchored: target trials at chance (all but one tied) leave the source's best as they are;
    a target its surrogate predicts well gets the paper's map (the shifted optimum, as above)."""
    from agent.surrogates.hts import anchor_weight

    source_opt, target_opt = np.array([0.25, 0.3]), np.array([0.7, 0.75])
    f_s = lambda U: -((U - source_opt) ** 2).sum(1)  # noqa: E731
    f_t = lambda U: -((U - target_opt) ** 2).sum(1)  # noqa: E731
    U_s, U_t = lhs(60, 2, seed=1), lhs(8, 2, seed=2)
    chance = np.full(8, -2.3)
    chance[3] = -1.0
    assert anchor_weight(U_t, chance) == 1.0
    kept = hts_round(U_s, f_s(U_s), U_t, chance, seed=0, anchored=True)
    assert np.allclose(kept, U_s[np.argsort(-f_s(U_s), kind="stable")])  # the source's best, best first
    assert anchor_weight(U_t, f_t(U_t)) < 0.3
    mapped = hts_round(U_s, f_s(U_s), U_t, f_t(U_t), seed=0, anchored=True)
    best_source = U_s[np.argsort(-f_s(U_s))[:3]]
    assert f_t(mapped[:3]).mean() > f_t(best_source).mean() + 0.1
