"""hts-anchored hands its slots to BO once a whole round of mapped points has not beaten the best
trial before it; paper 001's hts never does; the decision depends on the trials alone."""

from __future__ import annotations

import numpy as np

from agent.config import StudySettings
from agent.knowledge.records import TRIAL_OK, TRIAL_RUNNING, TrialRecord
from agent.samplers.bo import BoSampler
from agent.samplers.hts import HtsSampler
from agent.space import Float, SearchSpace
from agent.surrogates.contract import SurrogateInputs
from agent.surrogates.source_fits import SourceTask
from agent.surrogates.specs import GpSurrogate

SPACE = SearchSpace([Float("a", 0.0, 1.0), Float("b", 0.0, 1.0)])


def _target(u: np.ndarray) -> float:
    return float(-((u - 0.7) ** 2).sum())


def _sampler(anchored: bool) -> HtsSampler:
    settings = StudySettings(
        job="j",
        job_name="j",
        dataset="d",
        dataset_name="d",
        fingerprint="f",
        space_signature=SPACE.signature(),
        metric="m",
        mode="max",
        trials=20,
        n_init=4,
        random_every=0,
        seed=0,
    )
    U = np.random.default_rng(3).random((30, 2))
    source = SourceTask("k", "source", U, -((U - 0.2) ** 2).sum(1))  # the source's optimum is far away
    after = BoSampler(SPACE, settings, GpSurrogate(SurrogateInputs(SPACE, seed=0))) if anchored else None
    return HtsSampler(SPACE, settings, [source], preferred="k", anchored=anchored, after=after)


def _run(sampler: HtsSampler, n: int, values: dict[int, float] | None = None) -> list[TrialRecord]:
    trials: list[TrialRecord] = []
    for number in range(n):
        s = sampler.suggest(number, trials)
        u = SPACE.encode(s.config)
        value = (values or {}).get(number, _target(u))
        trials.append(TrialRecord(f"t{number}", number, TRIAL_OK, s.config, value, s.origin))
    return trials


def test_a_round_that_does_not_improve_hands_the_rest_to_bo() -> None:
    # the initial design holds the best value; round 0 (slots 4-6) maps the source's best and cannot beat it
    trials = _run(_sampler(anchored=True), 10, values={0: 10.0})
    origins = [t.origin for t in trials]
    assert origins[:4] == ["init:lhs"] * 4
    assert all(o.startswith("hts-anchored:source") for o in origins[4:7]), origins
    assert all(o.startswith("bo:") for o in origins[7:]), origins
    # paper 001's hts keeps mapping
    plain = [t.origin for t in _run(_sampler(anchored=False), 10, values={0: 10.0})]
    assert all(o.startswith("hts:source") for o in plain[4:]), plain


def test_an_unfinished_round_does_not_hand_over_yet() -> None:
    sampler = _sampler(anchored=True)
    trials = _run(sampler, 6, values={0: 10.0})  # slot 6 of round 0 still running
    running = sampler.suggest(6, trials)
    trials.append(TrialRecord("t6", 6, TRIAL_RUNNING, running.config, None, running.origin))
    assert not sampler.handed_over(1, trials)
    assert sampler.suggest(7, trials).origin.startswith("hts-anchored:")
    trials[-1] = TrialRecord("t6", 6, TRIAL_OK, running.config, -1.0, running.origin)
    assert sampler.handed_over(1, trials)
